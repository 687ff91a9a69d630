"""`analyze`: run folder or trace folder in, Analysis out.

Ranks are parsed in worker processes (one trace each; only summaries come back), then resolved and
checked together: duplicate ranks, traces of a different job, and missing ranks are reported as issues
rather than guessed; every good rank is analysed whatever its neighbours look like.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from diagnose import __version__
from diagnose.metrics.pipeline_bubbles import analyse_pipeline
from diagnose.io.discover import discover, manifest_rank_of, rank_from_name
from diagnose.errors import LlmdiagError
from diagnose.io.loader import file_size
from diagnose.metrics.layout import DIMS, layout_from_pg, pipeline_groups
from diagnose.metrics.per_rank import RankJob, RankOutput, default_jobs, run_job
from diagnose.model.analysis import Aggregate, Analysis, Issue, PipelineAction
from diagnose.metrics.skew import skew

NS_PER_MS = 1e6


def analyze_path(path, *, comm_regex: str | None = None, exclude_last_step: bool = False, jobs: int | None = None,
                 progress: bool = False, top_k: int = 20, rules: bool = True) -> Analysis:
    src = discover(path)
    man = src.manifest
    cpu_cap = _get(man, "device", "memory_bytes") if _get(man, "device", "type") == "cpu" else None
    job_list = [RankJob(f, comm_regex, exclude_last_step, _stage_hint(man, f), cpu_cap, top_k) for f in src.files]
    outputs = _run_all(job_list, jobs or default_jobs(), progress)

    issues = [Issue(o.path, o.error, None, "error") for o in outputs if o.error]
    issues += [Issue(p, f"llmdiag: {p}: not a regular file ({why}); left out", None, "error") for p, why in src.skipped]
    good = [o for o in outputs if not o.error]
    if not good:
        first = issues[0].message if issues else "no usable trace"
        raise LlmdiagError(f"no usable trace among {len(outputs)} file(s); first problem: {first.removeprefix('llmdiag: ')}",
                           src.path)
    good = _resolve_ranks(good, man, issues)
    if not good:
        # The issues die with this exception, so the line itself says why (the CLI prints only the line).
        errs = [i for i in issues if i.severity == "error"]
        first = f"{errs[0].file}: {errs[0].message.removeprefix('llmdiag: ')}" if errs else "unknown"
        raise LlmdiagError(f"no usable trace: all {len(outputs)} file(s) rejected; first problem: {first}", src.path)
    for o in good:
        for w in o.metrics.warnings:
            issues.append(Issue(o.path, w, o.rank, "warning"))

    world = _world_size(good, man)
    ranks_found = sorted(o.rank for o in good)
    missing = sorted(set(range(world)) - set(ranks_found)) if world else []
    if missing:
        issues.append(Issue(src.path, f"{len(missing)} of {world} ranks have no trace ({_ranges(missing)}); "
                                      "world-level numbers cover the analysed ranks only", None, "warning"))
    if _get(man, "oversubscribed"):
        issues.append(Issue(src.path, f"{world} ranks ran on {_get(man, 'cpu_cores')} CPU cores: timings are "
                                      "contaminated by ranks competing for cores", None, "warning"))
    _mark_failed_ranks(man, issues)

    layout = (man or {}).get("layout") or layout_from_pg(good[0].distributed, world)
    hosts = {o.rank: o.host or str(_get(man, "ranks", str(o.rank), "host") or "") for o in good}
    offset = _clock_offsets(good, issues)
    for o in good:
        if man and isinstance(man.get("ranks"), dict):
            o.metrics.coords = {k: v for k, v in (man["ranks"].get(str(o.rank)) or {}).items() if k in DIMS}

    records = {o.rank: o.collectives.shifted(offset[o.rank]) for o in good}
    if not _can_match(records, layout):
        records = {}
    sk = skew(records, hosts, {o.rank: o.metrics.compute_ms for o in good}) if len(good) > 1 else None
    shift_ns = {h: s * NS_PER_MS for h, s in (sk.host_shift_ms.items() if sk else [])}

    pipeline = _pipeline(good, man, offset, hosts, shift_ns)
    metrics = sorted((o.metrics for o in good), key=lambda m: m.rank)
    analysis = Analysis(
        source=os.path.abspath(src.path), name=src.name, trace_kind=_kind(metrics), world_size=world,
        layout=layout, manifest=man, ranks=metrics, ranks_missing=missing,
        aggregate=_aggregate(metrics, man), pipeline=pipeline, skew=sk, issues=issues,
        options={"comm_regex": comm_regex, "exclude_last_step": exclude_last_step,
                 "files": len(src.files), "bytes": sum(o.bytes_read for o in good), "run_folder": src.run_folder},
        llmdiag_version=__version__,
    )
    if rules:
        from diagnose.rules import findings

        analysis.findings = findings(analysis.to_dict())
    return analysis


MIN_BYTES_PER_WORKER = 1 << 18  # on disk (~2.5 MB of JSON, ~25 ms to parse): less is cheaper than forking a worker


def _run_all(jobs: list[RankJob], n_workers: int, progress: bool) -> list[RankOutput]:
    """Outputs in the order of `jobs`. Largest files go first, so one big rank does not finish alone at the
    end; small inputs run in this process (forking workers would cost more than the parse)."""
    n = len(jobs)
    show = progress and sys.stderr.isatty()
    sizes = [file_size(j.path) for j in jobs]
    if n == 1 and n_workers > 1:  # one rank: its parse is split across the cores instead (split_parse.py)
        jobs = [dataclasses.replace(jobs[0], helpers=n_workers)]
    n_workers = max(1, min(n_workers, n, sum(sizes) // MIN_BYTES_PER_WORKER))
    order = sorted(range(n), key=lambda k: -sizes[k])

    def tick(k):
        if show:
            sys.stderr.write(f"\ranalysing traces {k}/{n}")
            sys.stderr.flush()

    out: list = [None] * n
    if n_workers <= 1:
        results = map(run_job, (jobs[k] for k in order))
        for done, (k, res) in enumerate(zip(order, results), 1):
            out[k] = res
            tick(done)
    else:
        with ProcessPoolExecutor(max_workers=n_workers) as ex:
            for done, (k, res) in enumerate(zip(order, ex.map(run_job, (jobs[k] for k in order), chunksize=1)), 1):
                out[k] = res
                tick(done)
    if show:
        sys.stderr.write("\n")
    return out


def _resolve_ranks(good: list[RankOutput], man: dict | None, issues: list[Issue]) -> list[RankOutput]:
    """distributedInfo, then manifest, then file name; duplicates and other jobs are rejected, not guessed."""
    for o in good:
        if o.rank is None:
            r = manifest_rank_of(man, o.path)
            src = "manifest"
            if r is None:
                r, src = rank_from_name(o.path), "file name"
            if r is None:
                issues.append(Issue(o.path, "no rank in distributedInfo, manifest or file name", None, "warning"))
            else:
                issues.append(Issue(o.path, f"no rank in distributedInfo: rank {r} taken from the {src}", r, "warning"))
            o.rank = r
    unnamed = [o for o in good if o.rank is None]
    if unnamed:
        taken = {o.rank for o in good if o.rank is not None}
        free = (r for r in range(10**9) if r not in taken)
        for o in unnamed:
            o.rank = next(free)
            issues.append(Issue(o.path, f"numbered rank {o.rank} by file order", o.rank, "warning"))
    sizes = Counter(o.world_size for o in good if o.world_size)
    if len(sizes) > 1:
        main = sizes.most_common(1)[0][0]
        for o in good:
            if o.world_size and o.world_size != main:
                issues.append(Issue(o.path, f"trace of a different job (world size {o.world_size}, the others "
                                            f"{main}); left out", o.rank, "error"))
        good = [o for o in good if not o.world_size or o.world_size == main]
    world = sizes.most_common(1)[0][0] if sizes else _get(man, "world_size")
    if isinstance(world, int) and world > 0:
        for o in good:
            if o.rank >= world:
                issues.append(Issue(o.path, f"rank {o.rank} is outside the world of {world} ranks (contradictory "
                                            "distributedInfo or file name); left out", o.rank, "error"))
        good = [o for o in good if o.rank < world]
    count = Counter(o.rank for o in good)
    for o in good:
        if count[o.rank] > 1:
            issues.append(Issue(o.path, f"rank {o.rank} appears in {count[o.rank]} files; all of them left out "
                                        "(which one is right cannot be told)", o.rank, "error"))
    good = [o for o in good if count[o.rank] == 1]
    for o in good:
        o.metrics.rank = o.rank
    return good


MAX_CLOCK_US = 2.0**52  # µs (~142 years): beyond it a float clock has lost its µs and the trace is not a real clock


def _clock_offsets(good: list[RankOutput], issues: list[Issue]) -> dict[int, int]:
    """ns from the earliest rank's time 0 to each rank's; a rank with an absurd clock origin is not aligned."""
    ok = [o.metrics.origin_us for o in good if math.isfinite(o.metrics.origin_us) and abs(o.metrics.origin_us) < MAX_CLOCK_US]
    origin = min(ok) if ok else 0.0
    out = {}
    for o in good:
        d = (o.metrics.origin_us - origin) * 1000
        if not math.isfinite(d) or abs(d) >= 2**62:
            issues.append(Issue(o.path, f"implausible clock origin ({o.metrics.origin_us:g} µs): not aligned with the "
                                        "other ranks", o.rank, "warning"))
            d = 0.0
        out[o.rank] = int(round(d))
    return out


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8' (at most 20 pieces)."""
    parts: list[str] = []
    start = prev = ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if r is not None:
            start = prev = r
    return ", ".join(parts[:20]) + (", ..." if len(parts) > 20 else "")


def _world_size(good: list[RankOutput], man: dict | None) -> int | None:
    ws = [o.world_size for o in good if o.world_size]
    if ws:
        return Counter(ws).most_common(1)[0][0]
    if man and isinstance(man.get("world_size"), int):
        return man["world_size"]
    return None


def _mark_failed_ranks(man: dict | None, issues: list[Issue]) -> None:
    for r, st in ((man or {}).get("rank_status") or {}).items():
        if isinstance(st, dict) and st.get("status") not in (None, "ok"):
            issues.append(Issue(str(st.get("trace") or f"rank {r}"), f"rank {r} {st.get('status')} during the run: "
                                f"{str(st.get('error') or '').strip().splitlines()[-1:] or ''}", _int(r), "error"))


def _can_match(records: dict, layout: dict | None) -> bool:
    """Collectives without group info can only be matched when there is a single group."""
    if any(pg for c in records.values() for pg, _ in c.keys):
        return True
    return not layout or sum(1 for d in DIMS if (layout.get(d) or 1) > 1) <= 1


def _pipeline(good, man, offset, hosts, shift_ns):
    acts = {}
    for o in good:
        sh = offset[o.rank] + round(shift_ns.get(hosts.get(o.rank, ""), 0))  # whole ns, as skew.py made them
        acts[o.rank] = [type(a)(a.step, a.stage, a.kind, a.mb, a.start + sh, a.end + sh) for a in o.actions]
    with_actions = [r for r, a in acts.items() if a]
    if not with_actions:
        return None
    pp = (man or {}).get("pipeline") or {}
    groups = pipeline_groups(man, {o.rank: o.distributed for o in good}, with_actions)
    for g in groups:  # `Forward i` spans carry no stage: a rank's stage is its place in its pipeline
        for pos, r in enumerate(g):
            if r in acts:
                acts[r] = [type(a)(a.step, pos, a.kind, a.mb, a.start, a.end) if a.stage < 0 else a for a in acts[r]]
    schedule = pp.get("schedule") or _infer_schedule(acts, with_actions)
    res = analyse_pipeline(acts, groups, schedule, pp.get("microbatches"), pp.get("stages_per_rank"),
                           bool(_get(man, "oversubscribed")))
    origin = min(a.start for r in with_actions for a in acts[r])
    for o in good:
        o.metrics.pipeline_actions = [
            PipelineAction(a.stage, a.kind, a.mb, (a.start - origin) / NS_PER_MS, (a.end - origin) / NS_PER_MS)
            for a in acts[o.rank]
        ]
    return res


def _infer_schedule(acts, ranks) -> str:
    kinds = {a.kind for r in ranks for a in acts[r]}
    if "W" in kinds or "I" in kinds:
        return "zbv"
    stages_per_rank = max(len({a.stage for a in acts[r]}) for r in ranks)
    if stages_per_rank > 1:
        return "interleaved1f1b"
    r0 = ranks[0]
    first_step = min(a.step for a in acts[r0])
    order = [a.kind for a in sorted(acts[r0], key=lambda a: a.start) if a.step == first_step]
    return "gpipe" if order == sorted(order, key=lambda k: k != "F") else "1f1b"


def _aggregate(ms, man) -> Aggregate:
    ov = [(m.overlap_ratio, m.rank) for m in ms if m.overlap_ratio is not None]
    peaks = [(mem.peak_allocated, m.rank) for m in ms for mem in m.memory]
    step = float(np.mean([m.step_time_ms for m in ms]))
    tokens = _get(man, "tokens_per_step")
    flops = _get(man, "model_flops_per_step")
    peak = _get(man, "device", "peak_flops")
    world = _get(man, "world_size") or len(ms)
    tps = tokens / (step / 1e3) if tokens and step > 0 else None
    achieved = flops / (step / 1e3) / world if flops and step > 0 else None
    return Aggregate(
        ranks=len(ms), step_time_ms=step, step_time_max_ms=max(m.step_time_ms for m in ms),
        overlap_ratio_min=min(v for v, _ in ov) if ov else None,
        overlap_ratio_mean=float(np.mean([v for v, _ in ov])) if ov else None,
        overlap_worst_rank=min(ov)[1] if ov else None,
        exposed_comm_frac_mean=float(np.mean([m.exposed_comm_frac for m in ms])),
        exposed_comm_frac_max=max(m.exposed_comm_frac for m in ms),
        idle_frac_mean=float(np.mean([m.idle_frac for m in ms])),
        compute_frac_mean=float(np.mean([m.compute_ms / m.step_time_ms if m.step_time_ms else 0 for m in ms])),
        memory_peak_max=max(peaks)[0] if peaks else None, memory_peak_rank=max(peaks)[1] if peaks else None,
        tokens_per_s=tps, mfu=(achieved / peak) if achieved and peak else None,
        achieved_tflops_per_device=achieved / 1e12 if achieved else None,
    )


def _kind(ms) -> str:
    kinds = {m.trace_kind for m in ms}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _stage_hint(man: dict | None, path: str) -> int | None:
    r = rank_from_name(path)
    stages = _get(man, "ranks", str(r), "stages") if r is not None else None
    return stages[0] if isinstance(stages, list) and stages else None


def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
