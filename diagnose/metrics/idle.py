"""Device idle attributed to what the host was doing meanwhile (HTA's idle-time breakdown, per step, by op).

Idle = window − U(kernels, collectives, memcpy, memset). Each idle nanosecond goes to the first of, in order:
capture edge (before the window's first / after its last device event: the profiler's window, not the job),
queued (the kernel that ends the gap was launched before the gap began: the device waited on a dependency,
not on the host, so no host-side change removes it), a blocking runtime call or host sync op (`aten::item`,
`cudaStreamSynchronize`, `hipFree`, ..., by name),
the DataLoader, a host-side communication wait, any other host op (host-bound: launches cannot keep up),
and what is left (no host event seen). Attributing each piece once keeps the parts summing to the idle time.
"""

from __future__ import annotations

import re

import numpy as np

from diagnose.io.trace import ANNOTATION, COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, RUNTIME, SYNC, RankTrace
from diagnose.metrics import intervals as iv
from diagnose.metrics.classify import prefiltered
from diagnose.metrics.kernels import is_dataloader
from diagnose.metrics.overlap import in_windows
from diagnose.metrics.steps import Window
from diagnose.model.format import NS_PER_MS
from diagnose.model.idle import IdleBreakdown, TrainingEvidence

# Host ops that block until the device catches up (`.item()`, `.cpu()`, `.tolist()` end in one of these).
HOST_SYNC_OP_RE = re.compile(r"^aten::(item|_local_scalar_dense|nonzero)$")
# Runtime/driver calls that block the host or serialise the device (no caching allocator: Malloc/Free).
BLOCKING_RUNTIME_RE = re.compile(r"(Malloc|Free|Synchronize)(?!Async)|^(cuda|hip)Memcpy(WithStream)?$|^cuMemFree|"
                                 r"^cuMemAlloc", re.I)
WAIT_RE = re.compile(r"wait|barrier|recv", re.I)
BACKWARD_RE = re.compile(r"Backward|^autograd::engine::evaluate_function")
OPTIMIZER_RE = re.compile(r"^Optimizer\.step|_fused_adamw?_|_fused_sgd_|^aten::_foreach_(addcdiv|lerp|addcmul)_|"
                          r"^optimizer\.step", re.I)
DDP_RE = re.compile(r"^DistributedDataParallel\.forward|^nn\.Module: DistributedDataParallel|^DDP::|Reducer::")
FSDP_RE = re.compile(r"^FSDP::|FullyShardedDataParallel|^FSDP[A-Z]\w*\.|fully_shard")
is_host_sync_op = prefiltered(HOST_SYNC_OP_RE, "aten::")
is_blocking_runtime = prefiltered(BLOCKING_RUNTIME_RE, "alloc", "Alloc", "Free", "free", "ynchronize", "Memcpy")
is_backward = prefiltered(BACKWARD_RE, "Backward", "autograd")
is_optimizer = prefiltered(OPTIMIZER_RE, "ptimizer", "_fused_", "_foreach_")
RUNTIME_OPS_KEPT = 8  # op names kept per rank (the largest)


def _u(t: RankTrace, mask: np.ndarray) -> iv.Union:
    return iv.union(t.ts[mask], t.ts[mask] + t.dur[mask])


def _clip(u: iv.Union, lo: int, hi: int) -> iv.Union:
    """The part of a union inside [lo, hi] (binary search: a step touches only its own intervals)."""
    s, e = u
    a = np.searchsorted(e, lo, side="right")
    b = np.searchsorted(s, hi, side="left")
    return iv.union(np.clip(s[a:b], lo, hi), np.clip(e[a:b], lo, hi))


def idle_breakdown(t: RankTrace, wins: list[Window]) -> IdleBreakdown | None:
    """Mean per-step device idle of a GPU trace, split by cause (None on CPU-only traces)."""
    if not t.is_gpu or not wins:
        return None
    device = (t.stream >= 0) & np.isin(t.kind, (COMPUTE, COMM, MEMCPY, MEMSET))
    host = (t.stream < 0) & np.isin(t.kind, (CPU_OP, RUNTIME, SYNC, ANNOTATION))
    busy = _u(t, device)
    syncs = t.name_mask(is_host_sync_op, host & (t.kind == CPU_OP))
    blocking = t.name_mask(is_blocking_runtime, host & (t.kind == RUNTIME))
    named = [(t.names[i], _u(t, syncs & (t.name == i))) for i in np.unique(t.name[syncs]).tolist()]
    by_dur = np.unique(t.name[blocking]).tolist()
    by_dur.sort(key=lambda i: -int(t.dur[blocking & (t.name == i)].sum()))
    named += [(t.names[i], _u(t, blocking & (t.name == i))) for i in by_dur]
    loader = _u(t, t.name_mask(is_dataloader, host))
    waits = _u(t, (host & (t.kind == SYNC)) | t.name_mask(WAIT_RE.search, host & (t.kind == CPU_OP)))
    other_host = _u(t, host & np.isin(t.kind, (CPU_OP, RUNTIME, SYNC)))
    queued_gap = _queued(t, device)
    parts = dict.fromkeys(("idle", "edge", "queued", "runtime", "loader", "wait", "host", "rest"), 0)
    ops: dict[str, int] = {}
    for w in wins:
        dev = _clip(busy, w.start, w.end)
        idle = iv.difference((np.array([w.start]), np.array([w.end])), dev)
        parts["idle"] += iv.total(idle)
        if len(dev[0]):  # capture edges: no device work at all before / after
            edges = iv.union(np.array([w.start, dev[1][-1]]), np.array([dev[0][0], w.end]))
        else:
            edges = (np.array([w.start]), np.array([w.end]))
        left = idle
        queued = queued_gap(iv.difference(idle, edges))
        runtime = [(("runtime", name), u) for name, u in named]
        for key, u in (("edge", edges), ("queued", queued), *runtime, ("loader", loader), ("wait", waits),
                       ("host", other_host)):
            u = _clip(u, w.start, w.end)
            got = iv.intersect_total(left, u)
            if not got:
                continue
            left = iv.difference(left, u)
            if isinstance(key, tuple):
                parts["runtime"] += got
                ops[key[1]] = ops.get(key[1], 0) + got
            else:
                parts[key] += got
        parts["rest"] += iv.total(left)
    n = len(wins) * NS_PER_MS
    in_win = in_windows(t, syncs | blocking, wins)
    calls: dict[str, float] = {}
    for i in t.name[in_win].tolist():
        calls[t.names[i]] = calls.get(t.names[i], 0) + 1
    top = sorted(ops, key=lambda k: -ops[k])[:RUNTIME_OPS_KEPT]
    return IdleBreakdown(
        idle_ms=parts["idle"] / n, edge_ms=parts["edge"] / n, queued_ms=parts["queued"] / n,
        runtime_ms=parts["runtime"] / n,
        dataloader_ms=parts["loader"] / n, comm_wait_ms=parts["wait"] / n, host_bound_ms=parts["host"] / n,
        unattributed_ms=parts["rest"] / n, runtime_ops={k: ops[k] / n for k in top},
        runtime_calls={k: calls.get(k, 0) / len(wins) for k in sorted(set(top) | set(calls))[:2 * RUNTIME_OPS_KEPT]},
    )


def _queued(t: RankTrace, device: np.ndarray):
    """A function: idle gaps -> the gaps whose next device event was launched before the gap began. Then the
    work was already queued and the device waited on a dependency (another stream, an event, a collective's
    peer), not on the host; HTA calls the other case host wait. Vectorised: one binary search per gap."""
    hl = np.flatnonzero((t.stream < 0) & (t.corr >= 0))
    hc, first = np.unique(t.corr[hl], return_index=True)  # the first host event of each correlation: the launch
    hts = t.ts[hl][first]
    di = np.flatnonzero(device)
    dts, dcorr = t.ts[di], t.corr[di]
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    def gaps(idle: iv.Union) -> iv.Union:
        gs, ge = idle
        if not len(gs) or not len(di) or not len(hc):
            return empty
        j = np.minimum(np.searchsorted(dts, ge), len(di) - 1)  # the device event that ends each gap
        c = dcorr[j]
        k = np.minimum(np.searchsorted(hc, c), len(hc) - 1)
        launched = (dts[j] == ge) & (c >= 0) & (hc[k] == c)
        keep = launched & (hts[k] < gs)
        return gs[keep], ge[keep]

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
