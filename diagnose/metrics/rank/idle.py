"""Device idle attributed to what the host was doing meanwhile (HTA's idle-time breakdown, per step, by op).

Idle = window − U(kernels, collectives, memcpy, memset). Each idle nanosecond goes to the first of, in order:
capture edge (before the window's first / after its last device event: the profiler's window, not the job),
queued (the kernel that ends the gap was launched before the gap began: the device waited on a dependency,
not on the host, so no host-side change removes it), a blocking runtime call or host sync op (`aten::item`,
`cudaStreamSynchronize`, `hipFree`, ..., by name),
the DataLoader, a host-side communication wait, any other host op (host-bound: launches cannot keep up),
and what is left (no host event seen). Attributing each piece once keeps the parts summing to the idle time.
`idle_intervals` gives the attributed intervals of each step (the timeline's idle track); `idle_breakdown`
is their totals, so the numbers and the track cannot disagree.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.metrics.rank.sets import distinct, member
from llmdiag.diagnose.io.trace import ANNOTATION, COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, RUNTIME, SYNC, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.classify import prefiltered
from llmdiag.diagnose.metrics.rank.idle_stretch import alloc_steps, long_stretches, op_ids_contiguous
from llmdiag.diagnose.metrics.rank.kernels import is_dataloader
from llmdiag.diagnose.metrics.rank.launch_wait import launch_wait
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import IdleBreakdown, TrainingEvidence

# Host ops that block until the device catches up (`.item()`, `.cpu()`, `.tolist()` end in one of these).
# `aten::_copy_from` is the dispatcher's cross-device copy of backends other than CUDA/ROCm (MTIA, XLA, HPU, MPS):
# synchronous there, the host holds it until its DMA requests are done, so its idle is a copy's, not host work.
HOST_SYNC_OP_RE = re.compile(r"^aten::(item|_local_scalar_dense|nonzero|_copy_from)$")
# Runtime/driver calls that block the host or serialise the device (no caching allocator: Malloc/Free), and
# every synchronous copy: `cudaMemcpy`, `cudaMemcpy2D`, `hipMemcpyWithStream`, `hipMemcpyDtoH`, `cuMemcpyHtoD_v2`
# (any Memcpy of the CUDA/HIP runtime or driver without `Async` in its name).
BLOCKING_RUNTIME_RE = re.compile(r"(Malloc|Free|Synchronize)(?!Async)|^(cuda|hip|cu)Memcpy(?!\w*Async)\w*$|"
                                 r"^cuMemFree|^cuMemAlloc", re.I)
# The device allocator's own calls (pinned host memory and stream-ordered Async calls are not the caching
# allocator's): what tells an allocator that is off from one that is growing.
ALLOC_RE = re.compile(r"^(cuda|hip|hipExt)(Malloc|Free)(?!Host|Async)|^cuMem(Alloc|Free)(?!Host|Async)", re.I)
WAIT_RE = re.compile(r"wait|barrier|recv", re.I)
BACKWARD_RE = re.compile(r"Backward|^autograd::engine::evaluate_function")
OPTIMIZER_RE = re.compile(r"^Optimizer\.step|_fused_adamw?_|_fused_sgd_|^aten::_foreach_(addcdiv|lerp|addcmul)_|"
                          r"^optimizer\.step", re.I)
DDP_RE = re.compile(r"^DistributedDataParallel\.forward|^nn\.Module: DistributedDataParallel|^DDP::|Reducer::")
FSDP_RE = re.compile(r"^FSDP::|FullyShardedDataParallel|^FSDP[A-Z]\w*\.|fully_shard")
is_host_sync_op = prefiltered(HOST_SYNC_OP_RE, "aten::")
# (needles in lower case: the regex ignores case, so prefiltered tests them against the lower-cased name)
is_blocking_runtime = prefiltered(BLOCKING_RUNTIME_RE, "alloc", "free", "ynchronize", "memcpy")
is_alloc_call = prefiltered(ALLOC_RE, "alloc", "free")
is_backward = prefiltered(BACKWARD_RE, "Backward", "autograd")
is_optimizer = prefiltered(OPTIMIZER_RE, "ptimizer", "_fused_", "_foreach_")
RUNTIME_OPS_KEPT = 8  # op names kept per rank (the largest)


def _u(t: RankTrace, mask: np.ndarray) -> iv.Union:
    return iv.union(t.ts[mask], t.ts[mask] + t.dur[mask])


# The causes in order of precedence; each names its IdleBreakdown field (`<cause>_ms`).
CAUSES = ("edge", "queued", "runtime", "dataloader", "comm_wait", "host_bound", "unattributed")


@dataclass
class StepIdle:
    """One window's device idle (int ns, the rank's own clock) and where it went: `parts` are (cause, op name
    for `runtime` else "", intervals) in precedence order, disjoint, and together exactly `idle`."""

    step: int
    idle: iv.Union
    parts: list[tuple[str, str, iv.Union]]


def idle_intervals(t: RankTrace, wins: list[Window]) -> list[StepIdle] | None:
    """The attributed idle intervals of each window (None on CPU-only traces): what `idle_breakdown` sums."""
    got = _attribute(t, wins)
    return got[0] if got else None



def idle_breakdown(t: RankTrace, wins: list[Window]) -> IdleBreakdown | None:
    """Mean per-step device idle of a GPU trace, split by cause (None on CPU-only traces): the totals of
    `idle_intervals`, so the timeline's idle track and these numbers are one computation."""
    got = _attribute(t, wins)
    if got is None:
        return None
    steps, named, alloc = got
    parts = dict.fromkeys(CAUSES, 0)
    idle = 0
    ops: dict[str, int] = {}
    for st in steps:
        idle += iv.total(st.idle)
        for cause, op, u in st.parts:
            ns = iv.total(u)
            parts[cause] += ns
            if op:
                ops[op] = ops.get(op, 0) + ns
    n = len(wins) * NS_PER_MS
    calls: dict[str, float] = {}
    for i in t.name[in_windows(t, named, wins)].tolist():
        calls[t.names[i]] = calls.get(t.names[i], 0) + 1
    top = sorted(ops, key=lambda k: -ops[k])[:RUNTIME_OPS_KEPT]
    return IdleBreakdown(
        idle_ms=idle / n, **{f"{c}_ms": parts[c] / n for c in CAUSES}, runtime_ops={k: ops[k] / n for k in top},
        runtime_calls={k: calls.get(k, 0) / len(wins) for k in sorted(set(top) | set(calls))[:2 * RUNTIME_OPS_KEPT]},
        stretches=long_stretches(t, steps, named), alloc_steps=alloc_steps(t, wins, steps, alloc, is_alloc_call),
        python_events=int(t.cat_mask("python_function").sum()), op_ids_contiguous=op_ids_contiguous(t),
        launch_wait=launch_wait(t, steps),
    )


def _split(a: iv.Union, b: iv.Union) -> tuple[iv.Union, iv.Union]:
    """(A ∩ B, A − B) in one pass over the elementary pieces between all boundaries (as iv.difference)."""
    pts = distinct(np.concatenate([a[0], a[1], b[0], b[1]]))
    lo, hi = pts[:-1], pts[1:]
    in_a = iv.overlap_each(lo, hi, a) == (hi - lo)
    in_b = iv.overlap_each(lo, hi, b) > 0
    return iv.union(lo[in_a & in_b], hi[in_a & in_b]), iv.union(lo[in_a & ~in_b], hi[in_a & ~in_b])


def _attribute(t: RankTrace, wins: list[Window]) -> tuple[list[StepIdle], np.ndarray, np.ndarray] | None:
    """Each window's idle split by cause, the mask of the named blocking ops (their calls are counted) and that
    of the allocator's calls."""
    if not t.is_gpu or not wins:
        return None
    # Device work as the step breakdown counts it (overlap.timeline): its idle is this idle, to the ns.
    device = t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET)
    host = (t.stream < 0) & t.kind_mask(CPU_OP, RUNTIME, SYNC, ANNOTATION)
    busy = _u(t, device)
    syncs = t.name_mask(is_host_sync_op, host & (t.kind == CPU_OP))
    blocking = t.name_mask(is_blocking_runtime, host & (t.kind == RUNTIME)) | _pageable_copies(t, host)
    named = [(t.names[i], _u(t, syncs & (t.name == i))) for i in distinct(t.name[syncs]).tolist()]
    by_dur = distinct(t.name[blocking]).tolist()
    by_dur.sort(key=lambda i: -int(t.dur[blocking & (t.name == i)].sum()))
    named += [(t.names[i], _u(t, blocking & (t.name == i))) for i in by_dur]
    causes = [("runtime", name, u) for name, u in named]
    waits = (host & (t.kind == SYNC)) | t.name_mask(WAIT_RE.search, host & (t.kind == CPU_OP))
    causes += [("dataloader", "", _u(t, t.name_mask(is_dataloader, host))), ("comm_wait", "", _u(t, waits)),
               ("host_bound", "", _u(t, host & t.kind_mask(CPU_OP, RUNTIME, SYNC)))]
    queued_gap = _queued(t, device, blocking)
    orphan_calls = _u(t, _unmatched_copy_calls(t, blocking, device))
    out = []
    for w in wins:
        dev = iv.within(busy, w.start, w.end)
        idle = iv.difference((np.array([w.start]), np.array([w.end])), dev)
        if len(dev[0]):  # capture edge: no device work after (before the first kernel is the step's lead-in:
            # the host preparing the step, metrics/rank/steps.py, attributed like any other idle)
            edges = (np.array([dev[1][-1]]), np.array([w.end]))
        else:
            edges = (np.array([w.start]), np.array([w.end]))
        left, parts = idle, []
        queued, unlaunched, copies = queued_gap(iv.difference(idle, edges))
        # A gap ended by a device copy whose launch the trace lacks, under a blocking copy call whose own device
        # side the trace lacks, is that call's: the two are one copy whose correlation link was not recorded.
        # Any other gap ended by unlaunched work stays unattributed.
        if len(copies[0]) and len(orphan_calls[0]):
            unlaunched = iv.difference(unlaunched, _split(copies, iv.within(orphan_calls, w.start, w.end))[0])
        for cause, op, u in (("edge", "", edges), ("queued", "", queued), ("unattributed", "", unlaunched), *causes):
            u = iv.within(u, w.start, w.end)
            if not iv.intersect_total(left, u):
                continue
            got, left = _split(left, u)
            parts.append((cause, op, got))
        if len(left[0]):
            parts = [p for p in parts if p[0] != "unattributed"] + [("unattributed", "", iv.union_of(
                left, *[p[2] for p in parts if p[0] == "unattributed"]))]
        out.append(StepIdle(w.step, idle, parts))
    return out, syncs | blocking, t.name_mask(is_alloc_call, blocking)


def _pageable_copies(t: RankTrace, host: np.ndarray) -> np.ndarray:
    """Copy calls whose device copy touches pageable host memory (`Memcpy DtoH (Device -> Pageable)`): even
    `cudaMemcpyAsync` holds the host then (CUDA's API sync behaviour: pageable copies are staged and synchronous),
    so they block like `cudaMemcpy`."""
    dev = t.name_mask(lambda n: "Pageable" in n[:200], t.kind == MEMCPY) & (t.corr >= 0)
    if not dev.any():
        return np.zeros(len(t), bool)
    calls = host & (t.kind == RUNTIME) & (t.corr >= 0)
    calls[calls] = member(t.corr[calls], t.corr[dev])
    return t.name_mask(lambda n: "Memcpy" in n[:200], calls)


def _unmatched_copy_calls(t: RankTrace, blocking: np.ndarray, device: np.ndarray) -> np.ndarray:
    """Blocking copy calls (`cudaMemcpy`, `hipMemcpyWithStream`) whose device-side copy the trace does not link
    to them: no correlation id, or one no device event carries."""
    calls = t.name_mask(lambda n: "Memcpy" in n[:200], blocking)
    if not calls.any():
        return calls
    idx = np.flatnonzero(calls)
    linked = (t.corr[idx] >= 0) & member(t.corr[idx], distinct(t.corr[device & (t.corr >= 0)]))
    calls[idx[linked]] = False
    return calls


def _queued(t: RankTrace, device: np.ndarray, blocking: np.ndarray):
    """A function: idle gaps -> (the gaps whose next device event was launched before the gap began, those whose
    next device event has no recorded launch, and of those the ones it ends with a copy). Queued: the
    work was already queued and the device waited on a dependency (another stream, an event, a collective's
    peer), not on the host; HTA calls the other case host wait. Vectorised: one binary search per gap.
    A device event issued by a blocking call (a synchronous copy: `hipMemcpyWithStream`, `cudaMemcpy`) was not
    queued work: the call holds the host until the copy is done, so the device waits on that call (runtime)."""
    every = np.flatnonzero((t.stream < 0) & (t.corr >= 0))
    all_corr = distinct(t.corr[every])
    hl = every[~blocking[every]]
    hc, first = np.unique(t.corr[hl], return_index=True)  # the first host event of each correlation: the launch
    hts = t.ts[hl][first]
    di = np.flatnonzero(device)
    dts, dcorr = t.ts[di], t.corr[di]
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    # Where the trace records the launch of most device events, a gap ended by one whose launch is missing
    # (no host event carries its correlation) has no known cause: no host op can be said to have delayed it.
    known = member(dcorr, all_corr) if len(di) and len(all_corr) else np.zeros(len(di), bool)
    judge_missing = bool(len(di)) and known.mean() >= 0.5
    is_copy = t.kind[di] == MEMCPY

    def gaps(idle: iv.Union) -> tuple[iv.Union, iv.Union]:
        gs, ge = idle
        if not len(gs) or not len(di):
            return empty, empty, empty
        j = np.minimum(np.searchsorted(dts, ge), len(di) - 1)  # the device event that ends each gap
        c = dcorr[j]
        ends = dts[j] == ge
        missing = ends & ~known[j] & judge_missing
        copy = missing & is_copy[j]
        if not len(hc):
            return empty, (gs[missing], ge[missing]), (gs[copy], ge[copy])
        k = np.minimum(np.searchsorted(hc, c), len(hc) - 1)
        launched = ends & (c >= 0) & (hc[k] == c)
        keep = launched & (hts[k] < gs)
        return (gs[keep], ge[keep]), (gs[missing], ge[missing]), (gs[copy], ge[copy])

    return gaps


def training_evidence(t: RankTrace, wins: list[Window]) -> TrainingEvidence:
    """Backward and optimizer ops per step on the host: a trace without both is not a training step."""
    host = t.stream < 0
    if wins:  # host side of each step: its ProfilerStep span
        host_wins = [Window(w.step, w.host_start, w.host_end, w.host_start, w.host_end) for w in wins]
        host = in_windows(t, host, host_wins)
    n = max(1, len(wins))
    return TrainingEvidence(backward_ops=float(t.name_mask(is_backward, host).sum()) / n,
                            optimizer_ops=float(t.name_mask(is_optimizer, host).sum()) / n,
                            ddp_ops=float(t.name_mask(DDP_RE.search, t.stream < 0).sum()) / n,
                            fsdp_ops=float(t.name_mask(FSDP_RE.search, t.stream < 0).sum()) / n)
