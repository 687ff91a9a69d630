"""Everything computed from one rank's trace alone; runs in a worker process per rank.

Only small results leave the worker: the RankMetrics, the pipeline actions and the collective records
needed for cross-rank matching. The RankTrace columns die with the call.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.metrics.rank.classify import classify, collective_kind
from llmdiag.diagnose.model.roles import P2P_KINDS
from llmdiag.diagnose.errors import TraceError
from llmdiag.diagnose.metrics.rank.kernels import hints, top_kernels
from llmdiag.diagnose.metrics.rank.idle import idle_breakdown, training_evidence
from llmdiag.diagnose.metrics.rank.layout import pg_sizes, slim_pg_config
from llmdiag.diagnose.io.forked import Beside, Shares
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.memory import memory_stats
from llmdiag.diagnose.metrics.rank.elementwise import elementwise_facts
from llmdiag.diagnose.metrics.rank.profiler_options import profiler_facts
from llmdiag.diagnose.metrics.rank.moe import RankMoe, rank_moe
from llmdiag.diagnose.metrics.rank.accum import forward_counts, regather_ms
from llmdiag.diagnose.metrics.rank.overlap import comm_stats, gloo_collective_labels, in_windows, step_breakdowns, timeline
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action, extract_actions
from llmdiag.diagnose.metrics.rank.pipeline.infer import Links, infer_actions
from llmdiag.diagnose.metrics.rank.pipeline.p2p import Record, p2p_records
from llmdiag.diagnose.model.bounds import bound_values
from llmdiag.diagnose.model.devices import device_from_categories
from llmdiag.diagnose.model.analysis import RankMetrics
from llmdiag.diagnose.model.kernel_views import RankSequences
from llmdiag.diagnose.metrics.rank.collectives import Collectives, collectives_from
from llmdiag.diagnose.metrics.rank.before_capture import adopt as adopt_before_capture
from llmdiag.diagnose.metrics.rank.steps import step_source, windows
from llmdiag.diagnose.metrics.rank.outlier_ops import outlier_ops
from llmdiag.diagnose.metrics.rank.collective_repeats import collective_repeats
from llmdiag.diagnose.metrics.rank.comm_codec import comm_codec
from llmdiag.diagnose.metrics.rank.comm_host_stall import comm_host_stall
from llmdiag.diagnose.metrics.rank.groups import resolve as resolve_groups
from llmdiag.diagnose.metrics.rank.track_intervals import RankTracks, step_tracks
from llmdiag.diagnose.metrics.rank.exposed_union import exposed_union
from llmdiag.diagnose.io.trace import COMM
from llmdiag.diagnose.metrics.rank.action_costs import action_fixed_ns, host_p2p
from llmdiag.diagnose.metrics.rank.launch_stats import launch_stats
from llmdiag.diagnose.metrics.rank.op_kernels import op_kernels
from llmdiag.diagnose.metrics.rank.roofline import roofline
from llmdiag.diagnose.metrics.rank.stream_idle import stream_idle
from llmdiag.diagnose.metrics.rank.kernel_sequences import kernel_sequences
from llmdiag.diagnose.metrics.rank.critical_path.path import stated, step_paths
from llmdiag.diagnose.metrics.rank.chores import rank_chores
from llmdiag.diagnose.metrics.rank.optimizer_step import optimizer_step
from llmdiag.diagnose.metrics.rank.ddp_copies import ddp_copies
from llmdiag.diagnose.metrics.rank.recompute import recompute
from llmdiag.diagnose.metrics.rank.data_movement import data_movement
from llmdiag.diagnose.metrics.rank.norm_fusion import norm_fusion
from llmdiag.diagnose.metrics.rank.graph_replay import graph_replays
from llmdiag.diagnose.metrics.rank.held_reads import held_reads
from llmdiag.diagnose.metrics.rank.critical_path.held_read_sim import held_read_gain
from llmdiag.diagnose.metrics.rank.phase_cover import phase_cover
from llmdiag.diagnose.metrics.rank.critical_path.simulate import shared_simulator, simulated_gains, wanted
from llmdiag.diagnose.metrics.rank.critical_path.after_fix import after_fix_gains
from llmdiag.diagnose.metrics.rank.critical_path.after_fix import wanted as after_wanted
from llmdiag.diagnose.model.gemm_speedup import gemm_speedup
from llmdiag.diagnose.metrics.rank.critical_path.hops import PathHops, p2p_rows, path_hops
from llmdiag.diagnose.metrics.rank.critical_path.cuts import PathCuts, path_cuts

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class RankJob:
    path: str
    comm_regex: str | None = None
    exclude_last_step: bool = False
    stage_hint: int | None = None
    cpu_capacity: int | None = None
    top_k: int = 20
    helpers: int = 0  # processes that may share this one file's parse (a lone big rank: split_parse.py)
    tracks: bool | frozenset = False  # also return the exposed-comm and idle intervals (`analyze --timeline`):
    # of every rank, or of the ranks in the set
    hta_compat: bool = False  # the critical path on HTA's graph (metrics/rank/critical_path/hta.py)


@dataclass
class RankOutput:
    path: str
    rank: int | None
    world_size: int | None
    distributed: dict
    host: str
    device_name: str
    metrics: RankMetrics | None
    actions: list[Action] = field(default_factory=list)
    collectives: Collectives = field(default_factory=Collectives)
    links: Links | None = None  # pipeline neighbours inferred from send/recv (no PP: labels), or why not
    p2p: list[Record] = field(default_factory=list)  # send/recv with their peers, for matching across ranks
    bytes_read: int = 0
    error: str | None = None  # one line: the rank could not be analysed
    moe: RankMoe | None = None  # all-to-all split sizes and MoE times (diagnose.metrics.moe)
    base_time_ns: int | None = None  # Kineto's baseTimeNanoseconds: wall clock of ts 0 (jobs told apart: ranks.py)
    forwards: list[int] = field(default_factory=list)  # llmdiag/forward spans per step (gradient accumulation)
    regather_ms: float = 0.0  # all-gathers per step in accumulation microsteps after the first
    action_fixed_ns: list[int] = field(default_factory=list)  # per action: its size-independent host time
    host_p2p: list = field(default_factory=list)  # gloo send/recv spans with bytes (diagnose.metrics.action_costs)
    tracks: RankTracks | None = None  # the timeline's per-step intervals, where the job asked for them
    op_kernels: list = field(default_factory=list)  # OpKernels rows (diagnose.metrics.op_kernels): summed over ranks
    roofline: list = field(default_factory=list)  # RooflineRow rows (diagnose.metrics.roofline): summed over ranks
    stream_idle: list = field(default_factory=list)  # (stream, idle ns, host wait ns) (diagnose.metrics.stream_idle)
    kernel_sequences: RankSequences | None = None  # frequent kernel sequences (diagnose.metrics.kernel_sequences)
    path_hops: PathHops | None = None  # the rank's part of the job's critical path (critical_path/hops.py)
    path_cuts: PathCuts | None = None  # where its own path waited through a collective unrecorded (critical_path/cuts.py)


def failed_output(job: RankJob, line: str) -> RankOutput:
    """The output of a rank left out: `line` says which file and why; the other ranks carry on."""
    return RankOutput(job.path, None, None, {}, "", "", None, error=line)


def run_job(job: RankJob) -> RankOutput:
    """Never raises for a bad file: the error comes back as text so the other ranks carry on."""
    try:
        return _run(job)
    except TraceError as e:
        return failed_output(job, e.line())
    except MemoryError:
        return failed_output(job, f"llmdiag: {job.path}: out of memory while parsing (trace too large for this machine)")
    except Exception as e:  # a bug of ours, not the user's: this rank is left out, the others carry on
        return failed_output(job, f"llmdiag: {job.path}: internal error while analysing this trace "
                                  f"({type(e).__name__}: {e}) (a bug in llmdiag; please report it with the trace)")


def _run(job: RankJob) -> RankOutput:
    t = load_trace(job.path, job.helpers)
    classify(t, job.comm_regex)
    wins, warns = windows(t, job.exclude_last_step)
    if not wins:
        raise TraceError("no events to analyse", job.path, "the trace holds no complete events")
    tl = timeline(t)
    steps = step_breakdowns(tl, wins)
    n = len(steps)

    def mean(attr):  # map/attrgetter: the same left-to-right sum, without a Python call per step
        return float(sum(map(attrgetter(attr), steps)) / n)

    comm_total = sum(map(attrgetter("comm_ms"), steps))
    step_ms = mean("time_ms")
    dist = t.distributed
    host = str(t.meta.get("host_name", "") or "")
    top, kernel_ms = top_kernels(t, wins, job.top_k)
    groups = resolve_groups(t, np.flatnonzero(in_windows(t, np.asarray(t.kind == COMM), wins)))  # once, for both users
    want_tracks = job.tracks is True or bool(job.tracks and t.rank in job.tracks)
    # The critical path, its what-ifs and hops on the other core for a lone rank (io/forked.py), else at result()
    beside = job.helpers > 1 and t.bytes_read >= BESIDE_BYTES
    shares = Shares(len(_SECTIONS), forking=beside)
    cp = Beside(beside, _critical_path, t, wins, job, groups, want_tracks, shares)
    # What the path's what-ifs need from here first (it waits for them once its walk is done), the rest after
    hint, idle = hints(t, wins, mean("idle_ms"), step_ms), idle_breakdown(t, wins)
    fusion = norm_fusion(t, wins)  # normalization chains (rules/fusion.py); before `want`: simulated
    p2p, no_peers = p2p_records(t, wins)
    props = t.meta.get("deviceProperties")
    device = str(props[0].get("name", "")) if isinstance(props, list) and props and isinstance(props[0], dict) else ""
    device = device or device_from_categories(t.cats)  # an MTIA trace may name its device only by its categories
    reads: list[int] = []  # the held reads' holding calls, for their what-if (critical_path/held_read_sim.py)
    held = held_reads(t, wins, reads)  # small device-to-host reads holding the host (rules/held_reads.py)
    want = wanted(hint, idle, mean("exposed_comm_ms"), fusion) | after_wanted(hint.device_idle_frac)  # after_fix.py
    cp.send((want, p2p, device, reads))  # what the what-ifs and hops need from here
    metrics = RankMetrics(
        rank=t.rank if t.rank is not None else -1,
        file=job.path,
        host=host,
        trace_kind="gpu" if t.is_gpu else "cpu",
        steps=steps,
        step_time_ms=step_ms,
        compute_ms=mean("compute_ms"),
        comm_ms=mean("comm_ms"),
        overlapped_comm_ms=mean("overlapped_comm_ms"),
        exposed_comm_ms=mean("exposed_comm_ms"),
        compute_only_ms=mean("compute_only_ms"),
        other_ms=mean("other_ms"),
        idle_ms=mean("idle_ms"),
        overlap_ratio=(sum(map(attrgetter("overlapped_comm_ms"), steps)) / comm_total) if comm_total > 0 else None,
        exposed_comm_frac=mean("exposed_comm_ms") / step_ms if step_ms > 0 else 0.0,
        idle_frac=mean("idle_ms") / step_ms if step_ms > 0 else 0.0,
        comm_by_kind=comm_stats(t, tl, wins, pg_sizes(dist), t.world_size, groups),
        top_kernels=top,
        kernel_time_ms=kernel_ms,
        memory=memory_stats(t, job.cpu_capacity),
        hints=hint,
        origin_us=t.origin_us,
        warnings=list(t.warnings) + warns,
        idle=idle,
        training=training_evidence(t, wins),
    )
    metrics.warnings += bound_values(metrics)  # values no real run produces: a warning, never a crash (model/bounds.py)
    profiler_facts(t, wins, metrics.hints)  # with_stack / record_shapes / profile_memory evidence
    elementwise_facts(t, wins, metrics.hints)  # unfused elementwise kernels and their op patterns
    metrics.norm_fusion, metrics.held_reads = fusion, held
    actions, links = extract_actions(t, wins, job.stage_hint), None
    if not actions:  # no PP: labels: a Megatron-style pipeline is read from its send/recv
        actions, links = infer_actions(t, wins, p2p, no_peers)
    metrics.device = device[:200]  # the trace's own device name: foreign traces have no manifest to say it
    fixed, host_sends = action_fixed_ns(t, actions), host_p2p(t) if actions else []
    # the sections that read the trace alone: taken by this process, or by the path's child once it is done
    got = _take_sections(shares, t, wins, device)
    per_step, rank_cp, metrics.simulated_gain_ms, collectives, hops, cuts, cp_track, theirs = cp.result()
    shares.close()
    got.update(theirs)
    sec: dict[str, Any] = {}
    for k, (name, on_metrics, fn) in enumerate(_SECTIONS):
        sec[name] = got[k] if k in got else fn(t, wins, device)  # not in `got`: taken by a child that died
        if on_metrics:
            setattr(metrics, name, sec[name])
    metrics.phase_cover = phase_cover(t, wins) if metrics.chores and metrics.chores.sampled_share else []
    collectives.free_lo, collectives.free_hi = exposed_union(tl, wins)  # the exposed part of its waits (job/skew.py)
    # an event-sampled capture's path is not stated (critical_path/path.py stated): its note says why
    per_step, metrics.critical_path, metrics.critical_path_note = stated(per_step, rank_cp, metrics.chores, cp_track)
    for s, path in zip(steps, per_step):
        s.critical_path = path
    return RankOutput(
        path=job.path, rank=t.rank, world_size=t.world_size, distributed=_small(dist), host=host,
        device_name=device, metrics=metrics, actions=actions, links=links, p2p=p2p,
        collectives=collectives, bytes_read=t.bytes_read, moe=sec["moe"], base_time_ns=_base_time(t.meta),
        forwards=sec["forwards"], regather_ms=sec["regather_ms"], action_fixed_ns=fixed, host_p2p=host_sends,
        tracks=_tracks(t, wins, cp_track) if want_tracks else None,
        op_kernels=sec["op_kernels"], roofline=sec["roofline"], stream_idle=sec["stream_idle"],
        kernel_sequences=sec["kernel_sequences"], path_hops=hops, path_cuts=cuts,
    )


BESIDE_BYTES = 4 << 20  # decompressed: below, the path's share (~5 ms) is worth less than the fork


# The sections that read the trace and its windows alone, costliest first (~1-7 ms each on a 10-35 MB trace):
# (name, whether it is a RankMetrics field (else the RankOutput's), its computation from the trace, windows and
# device). A section's number names it in both processes (io/forked.py Shares): whichever is free takes the next.
_SECTIONS: tuple[tuple[str, bool, Callable[..., object]], ...] = (
    ("data_movement", True, lambda t, w, d: data_movement(t, w)),  # cat / layout-transpose / copy kernels
    ("op_kernels", False, lambda t, w, d: op_kernels(t, w) if t.is_gpu else []),  # HTA's view
    ("kernel_sequences", False, lambda t, w, d: kernel_sequences(t, w) if t.is_gpu else None),
    ("comm_host_stall", True, lambda t, w, d: comm_host_stall(t, w) if t.is_gpu else None),
    ("chores", True, lambda t, w, d: rank_chores(t, w)),  # zero_grad, pageable copies, DDP broadcast, sampling
    ("roofline", False, lambda t, w, d: roofline(t, w, d) if t.is_gpu else []),  # TraceLens's view
    ("launch", True, lambda t, w, d: launch_stats(t, w) if t.is_gpu else None),
    ("ddp_copies", True, lambda t, w, d: ddp_copies(t, w)),
    ("optimizer", True, lambda t, w, d: optimizer_step(t, w)),  # the optimizer step's span, device idle, launches
    ("moe", False, lambda t, w, d: rank_moe(t, w)),
    ("graph_replays", True, lambda t, w, d: graph_replays(t, w)),
    ("stream_idle", False, lambda t, w, d: stream_idle(t, w) if t.is_gpu else []),
    ("recompute", True, lambda t, w, d: recompute(t, w)),  # activation checkpointing's recomputed forward
    ("outlier_ops", True, lambda t, w, d: outlier_ops(t, w)),  # outlier steps' grown host ops
    ("outlier_collectives", True, lambda t, w, d: collective_repeats(t, w)),  # ... and iterations
    ("comm_codec", True, lambda t, w, d: comm_codec(t, w) if t.is_gpu else None),
    ("steps_source", True, lambda t, w, d: step_source(t)),
    ("forwards", False, lambda t, w, d: forward_counts(t, w)),
    ("regather_ms", False, lambda t, w, d: regather_ms(t, w)),
)


def _take_sections(shares: Shares, t, wins, device: str) -> dict[int, object]:
    """{number: value} of the sections this process takes until none is left."""
    got = {}
    while (k := shares.next()) is not None:
        got[k] = _SECTIONS[k][2](t, wins, device)
    return got


def _critical_path(t, wins, job: RankJob, groups, want_tracks: bool, shares: Shares, get):
    """The rank's critical path per step and over its steps, its simulated what-ifs, its collectives, the job
    path's hops and cuts (critical_path/cuts.py), with the timeline's path segments; `get()`: (what-ifs wanted,
    p2p records, device, held reads). Then the sections nobody took yet ({their number: value})."""
    cp_track: list | None = [] if want_tracks else None
    walker: list = []
    per_step, rank_cp = step_paths(t, wins, job.hta_compat, cp_track, walker)
    row_ev: list[int] = []
    collectives = collective_records(t, wins, groups, row_ev)
    want, p2p, device, reads = get()
    sims = shared_simulator(t, wins, walker[0].g if walker else None)  # the what-ifs on the path's graph, built once
    gains = simulated_gains(t, wins, gemm_speedup(device)[0], groups, want, sims=sims)
    gains.update(held_read_gain(t, wins, reads, sims=sims))  # the held reads' waits gone
    gains.update(after_fix_gains(t, wins, gemm_speedup(device)[0], want, sims=sims))
    rows, sr = np.array(row_ev, np.int64), p2p_rows(t, p2p) if walker else None  # the job path's part (hops, cuts)
    hops = path_hops(walker[0], rows, collectives.start, wins, sr, t) if walker else None
    cuts = (path_cuts(walker[0], hops, rows, collectives.start, collectives.end, wins, sr, t)
            if hops is not None else None)
    return per_step, rank_cp, gains, collectives, hops, cuts, cp_track, _take_sections(shares, t, wins, device)


def _tracks(t, wins, critical: list | None) -> RankTracks:
    out = step_tracks(t, wins)
    out.critical = critical or []
    return out


# Skew is measured on collectives only: the n-th send of one rank and the n-th send of another are unrelated,
# and a receiver waiting on its sender is the pipeline's dependency (its bubble), not a straggler.


def collective_records(t, wins, groups: dict | None = None, events: list | None = None) -> Collectives:
    """The rank's collectives in the windows (point-to-point left out), as the skew analysis matches them,
    each keyed on its process group's name and members (metrics/rank/groups.py). `events`, when given, gets
    each row's event index (the job path's hops)."""
    idx = np.flatnonzero(in_windows(t, t.kind == COMM, wins))
    relabel = gloo_collective_labels(t, idx)
    groups = groups if groups is not None else resolve_groups(t, idx)
    kinds, pgs = [], []
    for i in idx.tolist():
        kinds.append(relabel.get(i) or collective_kind(t.names[t.name[i]], t.comm_args.get(i, {})))
        pg = groups[i].key  # name and members: two groups of one name are never matched together
        pgs.append(pg)
    adopt_before_capture(t, idx, kinds, pgs)  # a kernel whose launch preceded the capture: its stream's collective
    out = []
    for i, kind, pg in zip(idx.tolist(), kinds, pgs):
        if kind in P2P_KINDS:
            continue
        args = t.comm_args.get(i, {})
        out.append((pg, kind, int(t.ts[i]), int(t.ts[i] + t.dur[i]), _nelems(args, "In"), _nelems(args, "Out"),
                    _seq(args)))
        if events is not None:
            events.append(i)
    return collectives_from(out)


def _base_time(meta: dict) -> int | None:
    v = meta.get("baseTimeNanoseconds")
    return v if type(v) is int and 0 < v < 2**63 else None


def _seq(args: dict) -> int:
    """The group's collective sequence number (Kineto's `Seq`, a number or its text), -1 unknown."""
    v = args.get("Seq", args.get("seq"))
    if type(v) is str and v.isdigit() and len(v) < 19:
        v = int(v)
    return v if type(v) is int and 0 <= v < 2**62 else -1


MAX_NELEMS = 1 << 62  # elements of one message: far beyond any real one, and int64-safe when summed


def _nelems(args: dict, side: str) -> int:
    """Elements sent (In) or received (Out): all_to_all(v)'s per-peer splits summed, else the msg nelems; -1."""
    split = args.get(f"{side} split size")
    n: object
    if isinstance(split, list) and split and all(type(x) is int and x >= 0 for x in split):
        n = sum(split)
    else:
        n = args.get(f"{side} msg nelems")
    return n if type(n) is int and 0 <= n < MAX_NELEMS else -1  # unknown beyond: the skew's int64 columns


def _small(dist: dict) -> dict:
    out = {k: dist[k] for k in ("rank", "world_size", "backend", "nccl_version") if k in dist}
    return {**out, "pg_config": slim_pg_config(dist)} if "pg_config" in dist else out  # no O(world) lists


