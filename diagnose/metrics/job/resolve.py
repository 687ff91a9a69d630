"""Resolution: the per-rank outputs of one job and its manifest in, the frozen Job (state.py) out.

Ranks are resolved and checked together (distributedInfo, then manifest, then file name; duplicate ranks,
traces of a different job and missing ranks become issues rather than guesses), clocks are aligned, and
collectives and send/recv are matched across ranks; the pipeline is measured on the common clock. Every good
rank is kept whatever its neighbours look like. The sections of the Analysis are then pure functions of the
Job (sections.py).

This is the one stage that writes into the workers' outputs, and only what is the rank's own data once the job
is known: its rank number and world (ranks.py), the members of its DeviceMesh groups (mesh.py), the peers of
send/recv its trace did not name (pipeline/timematch.py), and on its RankMetrics the manifest's coords, the
backend, `clock_shift_ns` and the pipeline actions on the common clock (what the timeline and the summary
read per rank); above PACK_ABOVE_RANKS ranks, memory timelines the Analysis does not keep are dropped here.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.metrics.job.clock import clock_shifts, origin_offsets
from llmdiag.diagnose.metrics.job.cross_rank import measure_pipeline, pipeline_groups, stages_of
from llmdiag.diagnose.metrics.job.layout import layout_from_pg
from llmdiag.diagnose.metrics.job.pipeline.p2p import match_p2p
from llmdiag.diagnose.metrics.job.pipeline.timematch import recover_peers
from llmdiag.diagnose.metrics.job.ranks import resolve_ranks
from llmdiag.diagnose.metrics.job.state import Job
from llmdiag.diagnose.metrics.job.straggler_issues import alignment_issues
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.metrics.rank.sets import median
from llmdiag.diagnose.model.analysis import Issue, RankMetrics
from llmdiag.diagnose.model.dims import DIMS
from llmdiag.diagnose.model.format import NS_PER_MS, ranges
from llmdiag.diagnose.model.pack import MEMORY_TIMELINES, PACK_ABOVE_RANKS

# Skew (two ranks or more), the pipeline (send/recv or PP: labels), the mesh (a manifest) and the timeline
# tracks (the report) are imported where their input is there: a one-rank trace pays for none of them.
if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest


def resolve_job(outputs: list[RankOutput], man: Manifest | None, *, source: str, skipped,
                tracks: dict | None = None) -> Job:
    """The Job of one run from its ranks' outputs (in file order); LlmdiagError when no rank is usable.
    `tracks`, when given, gets each rank's timeline intervals (metrics/rank/track_intervals.py): its own, plus
    the bubbles and straggler waits of this pass's pipeline and matching."""
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
    _rank_warnings(good, issues)
    world = _world_size(good, man)
    missing = sorted(set(range(world)) - {o.rank for o in good}) if world else []
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
    for o in good:
        if man:
            o.metrics.coords = man.coords_of(o.rank)
        # the trace's own backend word (untrusted: short, printed escaped like every trace string)
        b = (o.distributed or {}).get("backend") or (man.backend if man else None)
        o.metrics.backend = b[:40] if isinstance(b, str) else ""
    _mesh_members(good, man)
    records = {o.rank: o.collectives.shifted(offset[o.rank]) for o in good}
    if not _can_match(records, layout):
        records = {}
    matched: dict = {}  # the skew's matching per rank and row: the job's critical path and the what-if cross it
    sk = _skew(good, man, layout, hosts, records, offset, matched, source, issues) if len(good) > 1 else None
    # One clock shift per rank, computed once (clock.py): on the Job for every later reader, on the rank for
    # the timeline.
    shift = clock_shifts(offset, hosts, sk.host_shift_ms if sk else {})
    for o in good:
        o.metrics.clock_shift_ns = shift[o.rank]
    recover_peers(good, shift)
    pairs = match_p2p({o.rank: o.p2p for o in good if o.p2p}, shift)
    if pairs:
        from llmdiag.diagnose.model.skew import SkewResult  # send/recv matched: a skew to hold them

        sk = sk or SkewResult(matched=0, by_collective=[], last_arrivals={}, host_shift_ms={}, stragglers=[])
        sk.p2p = pairs
    if tracks is not None:  # each rank's own intervals (of the ranks asked for); the pipeline adds its bubbles
        tracks.update({o.rank: o.tracks for o in good if o.tracks is not None})
    pipeline, staged, chained = measure_pipeline(good, man, shift, issues, source, tracks)
    if tracks is not None and records:  # the straggler waits of the skew's own matching, on the aligned clock
        from llmdiag.diagnose.metrics.job.track_intervals import wait_tracks

        for r, xs in wait_tracks({o.rank: o.collectives.shifted(shift[o.rank]) for o in good}, shift).items():
            if r in tracks:
                tracks[r].waits = xs
    if pipeline and pipeline.inferred and int((layout or {}).get("pp") or 1) <= 1:
        layout = {**(layout or {d: 1 for d in DIMS}), "pp": pipeline.stages}  # only pp: the rest stays as known
    ranks = sorted(good, key=lambda o: o.rank)
    _drop_timelines([o.metrics for o in ranks])
    return Job(ranks, shift, missing, staged, chained, matched, pairs, bool(man and man.oversubscribed),
               in_order=good, source=source, manifest=man, world=world, duplicates=sorted(duplicates),
               layout=layout, hosts=hosts, offset_ns=offset, skew=sk, pipeline=pipeline, issues=issues)


def _rank_warnings(good: list[RankOutput], issues: list[Issue]) -> None:
    """Each rank's own warnings as issues; "looks like communication, --comm-regex" once, not once per rank."""
    hints: set[str] = set()
    for o in good:
        for w in o.metrics.warnings:
            if "--comm-regex" in w:
                if w in hints:
                    continue
                hints.add(w)
            issues.append(Issue(o.path, w, o.rank, "warning"))


def _skew(good, man, layout, hosts, records, offset, matched: dict, source: str, issues: list[Issue]):
    """The skew of the collectives matched across ranks (metrics/job/skew.py), each capture's start against the
    others', and what the matching says about itself (straggler_issues.py) as issues; `matched` gets the
    matching per rank and row."""
    from llmdiag.diagnose.metrics.job.skew import skew

    steps_n = [o.metrics.nsteps for o in good if o.metrics.nsteps]
    step_ms = float(median([o.metrics.step_time_ms for o in good])) if good else None
    sk = skew(records, hosts, *_skew_peers(good, man, layout), nsteps=float(median(steps_n)) if steps_n else 0.0,
              step_ms=step_ms, matched=matched)
    if sk:
        longest = max((st.time_ms for o in good for st in o.metrics.steps), default=None)
        # the capture's own start: its first event against the other ranks' earliest. The two earliest are
        # found once: a scan of every rank per window was quadratic (thousands of windows at 16k ranks).
        first = sorted(offset.items(), key=lambda kv: kv[1])[:2]
        for w in sk.capture_windows:
            other = next((v for r, v in first if r != w.rank), None)
            w.first_event_ms = (offset[w.rank] - other) / NS_PER_MS if other is not None else None
        sampled = {o.rank for o in good if o.metrics.chores is not None and o.metrics.chores.sampled_share is not None}
        alignment_issues(sk, step_ms, longest, source, issues, sampled)
    if sk and sk.size_mismatches:
        issues.append(Issue(source, f"{sk.size_mismatches} of {sk.matched} matched collectives disagree across ranks "
                                    "on their message size: where no sequence number (Seq) pairs them, the traces "
                                    "likely start at different collectives and matching by order pairs different ones",
                            None, "warning"))
    return sk


def _skew_peers(good, man, layout) -> tuple[dict[int, float], dict[int, int]]:
    """(compute per rank to compare, rank -> pipeline stage) for skew(). With pp > 1 stages differ by design:
    no compute is compared across ranks there (rules/comm.py compares ranks of one stage), and where no stage
    is known each rank's place in its pipeline group's rank list stands for it: a collective over two places
    is schedule-ordered."""
    stage_of = stages_of(good)
    if int((layout or {}).get("pp") or 1) <= 1:
        return {o.rank: o.metrics.compute_ms for o in good}, stage_of
    if not stage_of:
        groups = pipeline_groups(man, {o.rank: o.distributed for o in good}, [])
        stage_of = {r: pos for g in groups if len(g) > 1 for pos, r in enumerate(g)}
    return {}, stage_of


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
    import dataclasses

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


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
