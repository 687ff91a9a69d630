"""Cross-rank assembly: the per-rank outputs of one job in, the typed Analysis out.

Ranks are resolved and checked together (distributedInfo, then manifest, then file name; duplicate ranks,
traces of a different job and missing ranks become issues rather than guesses), clocks are aligned, then
skew, the pipeline and the aggregate are computed across ranks. Every good rank is analysed whatever its
neighbours look like.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.io.discover import rank_from_name
from llmdiag.diagnose.metrics.job.moe import moe_summary
from llmdiag.diagnose.metrics.job.accum import accum_summary
from llmdiag.diagnose.metrics.job.clock import clock_shifts, origin_offsets
from llmdiag.diagnose.model.dims import DIMS
from llmdiag.diagnose.metrics.job.layout import layout_from_pg, pipeline_groups
from llmdiag.diagnose.metrics.job.kernel_world import world_views
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.metrics.job.pipeline.p2p import match_p2p
from llmdiag.diagnose.metrics.job.pipeline.timematch import recover_peers
from llmdiag.diagnose.metrics.job.ranks import resolve_ranks
from llmdiag.diagnose.metrics.job.state import Job
from llmdiag.diagnose.metrics.job.straggler_issues import alignment_issues, compute_stragglers_into
from llmdiag.diagnose.model.analysis import Aggregate, Analysis, AnalysisOptions, Issue, PipelineAction, RankMetrics
from llmdiag.diagnose.model.format import NS_PER_MS, ranges
from llmdiag.diagnose.model.pack import MEMORY_TIMELINES, PACK_ABOVE_RANKS
from llmdiag.diagnose.metrics.rank.sets import median

# Skew and stragglers (two ranks or more), the pipeline (send/recv or PP: labels), the mesh (a manifest) and the
# timeline tracks (the report) are imported where their input is there: a one-rank trace pays for none of them.
if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest


def assemble(outputs: list[RankOutput], man: Manifest | None, *, source: str, name: str, skipped, opts: AnalysisOptions,
             version: str, tracks: dict | None = None) -> tuple[Analysis, Job]:
    """The Analysis of one job from its ranks' outputs (in file order), and the Job it resolved (state.py: the
    kept ranks, their clock shifts, the pipeline) for the replay and the what-if; LlmdiagError when no rank is
    usable. `tracks`, when given, gets each rank's timeline intervals (metrics/rank/track_intervals.py): its own,
    plus the bubbles and straggler waits of this pass's pipeline and matching."""
    issues = [Issue(o.path, o.error, None, "error") for o in outputs if o.error]
    issues += [Issue(p, f"llmdiag: {p}: not a regular file ({why}); left out", None, "error") for p, why in skipped]
    good = [o for o in outputs if not o.error]
    if not good:
        first = issues[0].message if issues else "no usable trace"
        raise LlmdiagError(f"no usable trace among {len(outputs)} file(s); first problem: {first.removeprefix('llmdiag: ')}",
                           source)
    good = resolve_ranks(good, man, issues, duplicates := [])
    if not good:
        # The issues die with this exception, so the line itself says why (the CLI prints only the line).
        errs = [i for i in issues if i.severity == "error"]
        first = f"{errs[0].file}: {errs[0].message.removeprefix('llmdiag: ')}" if errs else "unknown"
        raise LlmdiagError(f"no usable trace: all {len(outputs)} file(s) rejected; first problem: {first}", source)
    comm_regex_hints: set[str] = set()  # "looks like communication, --comm-regex": once, not once per rank
    for o in good:
        for w in o.metrics.warnings:
            if "--comm-regex" in w:
                if w in comm_regex_hints:
                    continue
                comm_regex_hints.add(w)
            issues.append(Issue(o.path, w, o.rank, "warning"))

    world = _world_size(good, man)
    ranks_found = sorted(o.rank for o in good)
    missing = sorted(set(range(world)) - set(ranks_found)) if world else []
    if missing:
        issues.append(Issue(source, f"{len(missing)} of {world} ranks have no trace ({ranges(missing)}); "
                                    "world-level numbers cover the analysed ranks only", None, "warning"))
    if man and man.oversubscribed:
        issues.append(Issue(source, f"{world} ranks ran on {man.cpu_cores} CPU cores: timings are "
                                    "contaminated by ranks competing for cores", None, "warning"))
    _mark_failed_ranks(man, issues)

    layout = (man.layout if man else None) or layout_from_pg(good[0].distributed, world) or _wrapper_layout(good, world)
    hosts = {o.rank: o.host or (man.host_of(o.rank) if man else None) or "" for o in good}
    offset = origin_offsets(good, issues)
    if man:
        for o in good:
            o.metrics.coords = man.coords_of(o.rank)

    for o in good:  # the trace's own backend word (untrusted: short, printed escaped like every trace string)
        b = (o.distributed or {}).get("backend") or (man.backend if man else None)
        o.metrics.backend = b[:40] if isinstance(b, str) else ""
    _mesh_members(good, man)
    records = {o.rank: o.collectives.shifted(offset[o.rank]) for o in good}
    if not _can_match(records, layout):
        records = {}
    steps_n = [o.metrics.nsteps for o in good if o.metrics.nsteps]
    step_ms = float(median([o.metrics.step_time_ms for o in good])) if good else None
    rows_matched: dict = {}  # the skew's matching per rank and row: the job's critical path crosses it
    if len(good) > 1:
        from llmdiag.diagnose.metrics.job.skew import skew
    sk = skew(records, hosts, *_skew_peers(good, man, layout), nsteps=float(median(steps_n)) if steps_n else 0.0,
              step_ms=step_ms, matched=rows_matched) if len(good) > 1 else None
    matched: dict | None = rows_matched if any(o.actions for o in good) else None  # kept for the what-if (pipeline)
    if sk:
        longest = max((st.time_ms for o in good for st in o.metrics.steps), default=None)
        # the capture's own start: its first event against the other ranks' earliest. The two earliest are
        # found once: a scan of every rank per window was quadratic (thousands of windows at 16k ranks).
        first = sorted(offset.items(), key=lambda kv: kv[1])[:2]
        for w in sk.capture_windows:
            other = next((v for r, v in first if r != w.rank), None)
            w.first_event_ms = (offset[w.rank] - other) / NS_PER_MS if other is not None else None
        alignment_issues(sk, step_ms, longest, source, issues)
    if sk and sk.size_mismatches:
        issues.append(Issue(source, f"{sk.size_mismatches} of {sk.matched} matched collectives disagree across ranks "
                                    "on their message size: where no sequence number (Seq) pairs them, the traces "
                                    "likely start at different collectives and matching by order pairs different ones",
                            None, "warning"))
    # One clock shift per rank, computed once (clock.py): on the Job for the replay and the what-if, on the rank
    # for the timeline.
    shift = clock_shifts(offset, hosts, sk.host_shift_ms if sk else {})
    for o in good:
        o.metrics.clock_shift_ns = shift[o.rank]
    recover_peers(good, shift)
    job_path, job_note = None, ""  # not stated where a rank is event-sampled (critical_path.py sampled_job_note)
    segs: list | None = [] if tracks is not None else None  # the path's stretches: the timeline's job path track
    if len(good) > 1:
        from llmdiag.diagnose.metrics.job.critical_path import job_critical_path, sampled_job_note

        job_path, job_note = job_critical_path(good, shift, rows_matched, segs), sampled_job_note(good)
    for o in good:  # read: not kept with the Job
        o.path_hops = o.path_cuts = None
    pairs = match_p2p({o.rank: o.p2p for o in good if o.p2p}, shift)
    if pairs:
        from llmdiag.diagnose.model.skew import SkewResult  # send/recv matched: a skew to hold them

        sk = sk or SkewResult(matched=0, by_collective=[], last_arrivals={}, host_shift_ms={}, stragglers=[])
        sk.p2p = pairs

    if tracks is not None:  # each rank's own intervals (of the ranks asked for); the pipeline adds its bubbles
        tracks.update({o.rank: o.tracks for o in good if o.tracks is not None})
        if segs:
            from llmdiag.diagnose.metrics.job.critical_path import segment_tracks

            segment_tracks(segs, tracks, shift)
    pipeline, staged, chained = _pipeline(good, man, shift, issues, source, tracks)
    if tracks is not None and records:  # the straggler waits of the skew's own matching, on the aligned clock
        from llmdiag.diagnose.metrics.job.track_intervals import wait_tracks

        for r, xs in wait_tracks({o.rank: o.collectives.shifted(shift[o.rank]) for o in good}, shift).items():
            if r in tracks:
                tracks[r].waits = xs
    if pipeline and pipeline.inferred and int((layout or {}).get("pp") or 1) <= 1:
        layout = {**(layout or {d: 1 for d in DIMS}), "pp": pipeline.stages}  # only pp: the rest stays as known
    metrics = sorted((o.metrics for o in good), key=lambda m: m.rank)
    _drop_timelines(metrics)
    a = Analysis(
        source=os.path.abspath(source), name=name, trace_kind=_kind(metrics), world_size=world,
        layout=layout, manifest=man, ranks=metrics, ranks_missing=missing,
        aggregate=_aggregate(metrics, man), pipeline=pipeline, skew=sk, issues=issues,
        options=dataclasses.replace(opts, bytes=sum(o.bytes_read for o in good)),
        llmdiag_version=version,
        ranks_duplicate=sorted(duplicates),
        critical_path=job_path, critical_path_note=job_note,
        moe=moe_summary({o.rank: o.moe for o in good if o.moe}, hosts),
        accum=accum_summary({o.rank: o.forwards for o in good}, metrics, man, layout,
                            {o.rank: o.regather_ms for o in good}),
        kernel_views=world_views([(o.metrics.rank, o.metrics.nsteps, o.metrics.device, o.op_kernels, o.roofline)
                                  for o in good], [(o.metrics.rank, o.metrics.nsteps, o.stream_idle) for o in good],
                                 [o.kernel_sequences for o in good if o.kernel_sequences]),
    )
    compute_stragglers_into(a)
    return a, Job(sorted(good, key=lambda o: o.rank), shift, missing, staged, chained, matched or {}, pairs,
                  bool(man and man.oversubscribed))


def _drop_timelines(metrics: list[RankMetrics]) -> None:
    """Above PACK_ABOVE_RANKS ranks, memory timelines are kept for the MEMORY_TIMELINES devices closest to
    capacity (those the report draws and the memory rules read; the summary keeps the same ones): 16,384
    ranks' curves were ~400 MB of Python lists in the coordinator. Peaks stay on every device."""
    if len(metrics) <= PACK_ABOVE_RANKS:
        return
    mem = [(m, r.rank) for r in metrics for m in r.memory if m.timeline]
    mem.sort(key=lambda x: (x[0].used_frac is None, -(x[0].used_frac if x[0].used_frac is not None else x[0].used),
                            x[1]))
    for m, _ in mem[MEMORY_TIMELINES:]:
        m.timeline = []


def _mesh_members(good: list[RankOutput], man: Manifest | None) -> None:
    """Members from the manifest's mesh for collectives whose group is a bare DeviceMesh name (metrics/rank/groups.py)."""
    if not man or not any(pg.startswith("mesh_") and "[" not in pg for o in good for pg, _ in o.collectives.keys):
        return
    from llmdiag.diagnose.metrics.job.mesh import mesh_members, with_mesh_members

    members = mesh_members(man, [o.rank for o in good])
    for o in good:
        if members and (keys := with_mesh_members(o.collectives.keys, o.rank, members)):
            o.collectives = dataclasses.replace(o.collectives, keys=keys)


def _wrapper_layout(good: list[RankOutput], world: int | None) -> dict | None:
    """Data parallel over the whole world, read from the trace's DDP / FSDP ops where nothing else names a layout
    (a foreign trace without a manifest or mesh group names): evidence, not a default. None otherwise."""
    if not world or world < 2:
        return None
    ev = [o.metrics.training for o in good if o.metrics.training is not None]
    dim = "fsdp" if any(e.fsdp_ops > 0 for e in ev) else "dp" if any(e.ddp_ops > 0 for e in ev) else None
    return {**{d: 1 for d in DIMS}, dim: world} if dim else None


def _world_size(good: list[RankOutput], man: Manifest | None) -> int | None:
    ws = [o.world_size for o in good if o.world_size]
    if ws:
        return Counter(ws).most_common(1)[0][0]
    if man and man.world_size:
        return man.world_size
    return None


def _mark_failed_ranks(man: Manifest | None, issues: list[Issue]) -> None:
    for r, st in (man.failed_ranks() if man else {}).items():
        issues.append(Issue(str(st.get("trace") or f"rank {r}"), f"rank {r} {st.get('status')} during the run: "
                            f"{str(st.get('error') or '').strip().splitlines()[-1:] or ''}", _int(r), "error"))


def _can_match(records: dict, layout: dict | None) -> bool:
    """Collectives without group info can only be matched when there is a single group."""
    if any(pg for c in records.values() for pg, _ in c.keys):
        return True
    return not layout or sum(1 for d in DIMS if (layout.get(d) or 1) > 1) <= 1


def _pipeline(good, man, shift, issues, source, tracks=None):
    """(PipelineResult or None, rank -> its actions with their stage (rank-relative ns; ranks in a chain only),
    the chains). Actions are staged on the rank's own clock and measured on the common one."""
    acts = {o.rank: o.actions for o in good}
    with_actions = [r for r, a in acts.items() if a]
    links = {o.rank: o.links for o in good if o.links is not None}
    groups, why = _chains(links)
    virtual, v_sched, v = False, "", None
    if why and all(lk.blocks for lk in links.values()):  # one stage per rank does not read: virtual stages?
        from llmdiag.diagnose.metrics.job.pipeline.virtual import virtual_layout

        blocks = {r: _moved(lk.blocks, shift[r]) for r, lk in links.items()}
        placed, groups, v_sched, v, v_why = virtual_layout(blocks, {o.rank: o.p2p for o in good}, shift)
        why = f"{why}; virtual stages (interleaved, zero-bubble, V-shaped) do not read either: {v_why}" if v_why else ""
        if not v_why:
            acts, virtual = {r: _moved(xs, -shift[r]) for r, xs in placed.items()}, True
            with_actions = [r for r, a in acts.items() if a]
    if why:  # send/recv without PP: labels that do not read as a pipeline: say so, guess nothing
        issues.append(Issue(source, f"pipeline layout unknown: send/recv seen but {why}", None, "warning"))
        return None, {}, []
    if not with_actions:
        return None, {}, []
    from llmdiag.diagnose.metrics.job.pipeline.bubbles import analyse_pipeline
    from llmdiag.diagnose.metrics.job.pipeline.chains import schedule_of
    from llmdiag.diagnose.metrics.job.pipeline.virtual import VIRTUAL_NOTE
    from llmdiag.diagnose.metrics.job.pipeline.vshape import V_NAME, V_NOTE
    from llmdiag.diagnose.metrics.job.track_intervals import bubble_tracks
    from llmdiag.diagnose.model.manifest import PipelineConfig

    pp = (man.pipeline if man else None) or PipelineConfig()
    if links:  # no PP: labels anywhere: stages from the chain of send/recv neighbours
        with_actions = [r for g in groups for r in g if acts.get(r)]
        acts = {r: acts[r] for r in with_actions}
    else:
        groups = pipeline_groups(man, {o.rank: o.distributed for o in good}, with_actions)
    for g in groups:  # `Forward i` spans carry no stage: a rank's stage is its place in its pipeline
        for pos, r in enumerate(g):
            if r in acts:
                acts[r] = [dataclasses.replace(a, stage=pos) if a.stage < 0 else a for a in acts[r]]
    schedule = pp.schedule or v_sched or (schedule_of(acts.get(groups[0][-1], [])) if links
                                          else _infer_schedule(acts, with_actions))
    on_clock = {r: _moved(xs, shift[r]) for r, xs in acts.items()}
    res = analyse_pipeline(on_clock, groups, schedule, pp.microbatches, pp.stages_per_rank or v)
    for g in groups if tracks is not None and res is not None else []:  # the bubbles this pipeline measured
        for r, xs in bubble_tracks([x for x in g if x in on_clock], on_clock, shift).items():
            if r in tracks:
                tracks[r].bubble = xs
    if res is not None and links:
        res.inferred = True
        how = (V_NOTE if v_sched == V_NAME else VIRTUAL_NOTE) if virtual else (
            "Inferred from send/recv (no PP: labels): stages from the chain of peers, microbatches and "
            "forward/backward from the transfers. ")
        res.inference_note = next((lk.note for lk in links.values() if lk.note), "") + how
    origin = min(a.start for r in with_actions for a in on_clock[r])
    for o in good:
        o.metrics.pipeline_actions = [
            PipelineAction(a.stage, a.kind, a.microbatch, (a.start - origin) / NS_PER_MS, (a.end - origin) / NS_PER_MS)
            for a in on_clock.get(o.rank, [])
        ]
    return res, {r: xs for r, xs in acts.items() if xs}, [list(g) for g in groups]


def _chains(links: dict) -> tuple[list, str]:
    """chains() of the ranks' send/recv links; imported only where a rank has links (no PP: labels)."""
    if not links:
        return [], ""
    from llmdiag.diagnose.metrics.job.pipeline.chains import chains

    return chains(links)


def _moved(acts: list[Action], ns: int) -> list[Action]:
    return [dataclasses.replace(a, start=a.start + ns, end=a.end + ns) for a in acts]


def _stages(good) -> dict[int, int]:
    """rank -> pipeline stage, where known: from its PP: labels, or its place in an inferred chain."""
    out = {o.rank: min(a.stage for a in o.actions) for o in good if o.actions and o.links is None}
    links = {o.rank: o.links for o in good if o.links is not None}
    groups, why = _chains(links)
    for g in groups if not why else []:
        out.update({r: pos for pos, r in enumerate(g)})
    return {r: s for r, s in out.items() if s >= 0}


def _skew_peers(good, man, layout) -> tuple[dict[int, float], dict[int, int]]:
    """(compute per rank to compare, rank -> pipeline stage) for skew(). With pp > 1 stages differ by design:
    no compute is compared across ranks there (rules/comm.py compares ranks of one stage), and where no stage
    is known each rank's place in its pipeline group's rank list stands for it: a collective over two places
    is schedule-ordered."""
    stage_of = _stages(good)
    if int((layout or {}).get("pp") or 1) <= 1:
        return {o.rank: o.metrics.compute_ms for o in good}, stage_of
    if not stage_of:
        groups = pipeline_groups(man, {o.rank: o.distributed for o in good}, [])
        stage_of = {r: pos for g in groups if len(g) > 1 for pos, r in enumerate(g)}
    return {}, stage_of


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


def _aggregate(ms, man: Manifest | None) -> Aggregate:
    ov = [(m.overlap_ratio, m.rank) for m in ms if m.overlap_ratio is not None]
    peaks = [(m.memory_peak, -m.rank) for m in ms if m.memory_peak is not None]  # a tie names the lowest rank
    step = float(np.mean([m.step_time_ms for m in ms]))
    tokens = man.tokens_per_step if man else None
    flops = man.model_flops_per_step if man else None
    peak = man.device.peak_flops if man and man.device else None
    world = (man.world_size if man else None) or len(ms)
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
        memory_peak_max=max(peaks)[0] if peaks else None, memory_peak_rank=-max(peaks)[1] if peaks else None,
        tokens_per_s=tps, mfu=(achieved / peak) if achieved and peak else None,
        achieved_tflops_per_device=achieved / 1e12 if achieved else None,
    )


def _kind(ms) -> str:
    kinds = {m.trace_kind for m in ms}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def stage_hint(man: Manifest | None, path: str) -> int | None:
    r = rank_from_name(path)
    stages = man.stages_of(r) if man and r is not None else []
    return stages[0] if stages else None


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
