"""Per-step time breakdown and communication/computation overlap of one rank.

overlap_ratio = |U(comm) ∩ U(compute)| / |U(comm)| (HTA's definition), per step and over all steps
(duration-weighted). Per collective kind and process group, each op's own overlapped fraction is summed
(Nsight's view), so one long exposed all-reduce is not hidden by many small overlapped ones.
"""

from __future__ import annotations

import weakref

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.classify import collective_kind
from llmdiag.diagnose.metrics.rank.groups import resolve as resolve_groups
from llmdiag.diagnose.model.analysis import CommGroupStats, StepBreakdown
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, SYNC, RankTrace
from llmdiag.diagnose.model.dtypes import element_bytes
from llmdiag.diagnose.model.format import NS_PER_MS

@dataclass
class Timeline:
    """Unions of one rank's busy time, by kind, over the whole trace."""

    compute: iv.Union
    comm: iv.Union
    other: iv.Union  # memcpy + memset


def timeline(t: RankTrace) -> Timeline:
    k = t.kind
    end = t.ts + t.dur

    def u(mask):
        return iv.union(t.ts[mask], end[mask])

    compute = u(k == COMPUTE)
    comm = k == COMM
    if not t.is_gpu:  # host blocking/enqueue time nested inside top-level ops is not compute
        compute = iv.difference(compute, u(k == SYNC))
        comm &= ~cpu_recv_mask(t)
    return Timeline(compute, u(comm), u((k == MEMCPY) | (k == MEMSET)))


def cpu_recv_mask(t: RankTrace) -> np.ndarray:
    """gloo point-to-point spans of a CPU-only trace: a gloo send or recv completes only when its peer posts the
    other side, so the time it is in flight outside compute is the rank waiting on its pipeline peer — the
    bubble (idle), not exposed communication (issue 14); the per-op view (comm_stats) still lists them."""
    return t.name_mask(lambda n: n.startswith(("gloo:recv", "gloo:send")), t.kind == COMM)


def step_breakdowns(tl: Timeline, wins: list[Window]) -> list[StepBreakdown]:
    """Each window's parts as differences of running coverage (|U ∩ [lo, hi]| = covered(hi) − covered(lo)),
    over unions built once for the whole trace: a handful of array operations for any number of steps, where
    clipping the unions per window cost ~55 Python calls a step (issue 35)."""
    if not wins:
        return []
    lo = np.array([w.start for w in wins], np.int64)
    hi = np.array([w.end for w in wins], np.int64)

    def inside(u: iv.Union) -> list[int]:
        return np.where(hi > lo, iv.covered_upto(u, hi) - iv.covered_upto(u, lo), 0).tolist()

    comp, comm = inside(tl.compute), inside(tl.comm)
    ov = inside(_intersection(tl.comm, tl.compute))
    busy = inside(iv.union_of(tl.compute, tl.comm, tl.other))
    ms = NS_PER_MS
    return [
        StepBreakdown(
            step=w.step, start_ms=w.start / ms, time_ms=(w.end - w.start) / ms, compute_ms=c / ms, comm_ms=m / ms,
            overlapped_comm_ms=o / ms, exposed_comm_ms=(m - o) / ms, compute_only_ms=(c - o) / ms,
            other_ms=(b - c - m + o) / ms, idle_ms=(w.end - w.start - b) / ms, overlap_ratio=(o / m) if m > 0 else None,
        )
        for w, c, m, o, b in zip(wins, comp, comm, ov, busy)
    ]


def _intersection(a: iv.Union, b: iv.Union) -> iv.Union:
    """A ∩ B for two unions, itself a union: A − (A − B)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a[0][:0], a[1][:0]
    return iv.difference(a, iv.difference(a, b))


def in_windows(t: RankTrace, mask: np.ndarray, wins: list[Window]) -> np.ndarray:
    """Events of `mask` that start inside one of the windows."""
    if not wins:
        return np.zeros(len(t), bool)
    return mask & _inside(t, wins)


# The last windows' membership of every event: ~130 calls a run ask it of the same windows, each a searchsorted
# of every event's start. One entry, keyed by the windows' bounds and the start column, which it holds weakly:
# the entry goes with the trace (its column freed, the callback drops it), no column is kept past its analysis.
_INSIDE: dict = {}


def _inside(t: RankTrace, wins: list[Window]) -> np.ndarray:
    bounds = tuple((w.start, w.end) for w in wins)
    got = _INSIDE.get("last")
    if got is not None and got[0] == bounds and got[1]() is t.ts:
        return got[2]
    starts = np.array([w.start for w in wins], np.int64)
    ends = np.array([w.end for w in wins], np.int64)
    k = np.searchsorted(starts, t.ts, side="right") - 1
    inside = (k >= 0) & (t.ts < ends[np.maximum(k, 0)])
    inside.flags.writeable = False
    _INSIDE["last"] = (bounds, weakref.ref(t.ts, lambda _: _INSIDE.clear()), inside)
    return inside


def message_bytes(args: dict) -> int | None:
    """Bytes moved by one collective from Kineto's args (NCCL records) or Input Dims (gloo spans)."""
    if "In msg nelems" in args or "Out msg nelems" in args:
        size = element_bytes(args.get("dtype", ""))
        n = max(_int(args.get("In msg nelems")), _int(args.get("Out msg nelems")))
        return n * size if size and n > 0 else None
    dims = args.get("Input Dims")
    if isinstance(dims, list) and dims:
        first = dims[0]
        if isinstance(first, list) and first and isinstance(first[0], list):
            first = first[0]  # TensorList
        if isinstance(first, list) and all(isinstance(d, int) for d in first):
            n = int(np.prod(first)) if first else 1
            return n * 4  # gloo spans on our CPU runs are float32; the type is not always recorded
    return None


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def busbw_factor(kind: str, n: int | None) -> float:
    """nccl-tests' bus-bandwidth factor."""
    if not n or n < 2:
        return 1.0
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def pg_label(args: dict) -> str:
    desc = str(args.get("Process Group Description", "") or "")
    name = str(args.get("Process Group Name", "") or "")
    if desc and desc not in ("undefined", "None"):
        return desc
    return name


def comm_stats(t: RankTrace, tl: Timeline, wins: list[Window], pg_sizes: dict[str, int],
               world_size: int | None, groups: dict | None = None) -> list[CommGroupStats]:
    """Per (kind, process group): count, time, overlapped time, bytes and bandwidth. `groups`: each comm
    event's group where the caller resolved them already (metrics/rank/groups.py)."""
    idx = np.flatnonzero(in_windows(t, t.kind == COMM, wins))
    if len(idx) == 0:
        return []
    ov = iv.overlap_each(t.ts[idx], t.ts[idx] + t.dur[idx], tl.compute)
    relabel = gloo_collective_labels(t, idx)
    of = groups if groups is not None else resolve_groups(t, idx)  # name from args, pg_config or gloo thread
    groups: dict[tuple[str, str], dict] = {}
    for j, i in enumerate(idx.tolist()):
        args = t.comm_args.get(i, {})
        kind = relabel.get(i) or collective_kind(t.names[t.name[i]], args)
        pg = of[i].label
        g = groups.setdefault((kind, pg), {"n": 0, "dur": 0, "ov": 0, "bytes": 0, "sized": 0, "sized_dur": 0,
                                           "size": None})
        d = int(t.dur[i])
        g["n"] += 1
        g["dur"] += d
        g["ov"] += int(ov[j])
        b = message_bytes(args)
        if b and d > 0:
            g["bytes"] += b
            g["sized"] += 1
            g["sized_dur"] += d
        gs = _int(args.get("Group size")) or pg_sizes.get(pg) or of[i].size or None
        g["size"] = gs or g["size"]
    out = []
    for (kind, pg), g in sorted(groups.items(), key=lambda kv: -kv[1]["dur"]):
        size = g["size"] or world_size
        algbw = g["bytes"] / g["sized_dur"] if g["sized_dur"] else None  # bytes/ns == GB/s
        out.append(
            CommGroupStats(
                kind=kind, pg=pg, count=g["n"], total_ms=g["dur"] / NS_PER_MS, overlapped_ms=g["ov"] / NS_PER_MS,
                overlap_ratio=g["ov"] / g["dur"] if g["dur"] else None, bytes=g["bytes"], sized_count=g["sized"],
                algbw_gbps=algbw, busbw_gbps=algbw * busbw_factor(kind, size) if algbw is not None else None,
                group_size=size,
            )
        )
    return out


def gloo_collective_labels(t: RankTrace, comm_idx: np.ndarray) -> dict[int, str]:
    """Kind of each gloo span from its c10d enqueue op (FIFO pairing; no id links them).

    gloo runs reduce-scatter as a full all_reduce, so the span's own name would mislabel it.
    """
    names = t.names
    gloo = [i for i in comm_idx.tolist() if names[t.name[i]].startswith("gloo:")]
    if not gloo:
        return {}
    c10d_ids = t.name_ids(lambda n: n.startswith(("c10d::", "_c10d_functional::")) and "wait" not in n)
    if not len(c10d_ids):
        return {}
    enq = np.flatnonzero(np.isin(t.name, c10d_ids))
    pending = [(int(t.ts[i]), collective_kind(names[t.name[i]])) for i in enq]
    out, p = {}, 0
    compatible = {("reducescatter", "allreduce"), ("allreduce", "allreduce"), ("allgather", "allgather"),
                  ("broadcast", "broadcast"), ("alltoall", "alltoall"), ("barrier", "allreduce")}
    for i in sorted(gloo, key=lambda i: int(t.ts[i])):
        gk = collective_kind(names[t.name[i]])
        if gk in ("send", "recv"):
            continue
        while p < len(pending) and pending[p][0] <= int(t.ts[i]):
            ck = pending[p][1]
            p += 1
            if ck == gk or (ck, gk) in compatible:
                out[i] = ck
                break
    return out
