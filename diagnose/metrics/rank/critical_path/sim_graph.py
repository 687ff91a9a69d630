"""The dependency graph as the what-if simulation (simulate.py) reads it: its host chains in order, the edges it
adds for launches blocked on a full launch queue, whether the graph explains the steps at all, and the re-timing's
order where trace time is not one (`kahn`)."""

from __future__ import annotations

import heapq

import numpy as np

from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank.sets import distinct, median
from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES, LAUNCH, STREAM, SYNC_EDGE, THREAD, Graph

HOST_GAP = CAUSES.index("host_gap")
QUEUE_CALL_NS = 50_000  # a launch call this long, and QUEUE_CALL_X times the median one, may have blocked
QUEUE_CALL_X = 10
UNEXPLAINED_NS = 1_000_000  # a launch delay, stream gap or unprofiled host gap this long: a wait the trace lacks
UNEXPLAINED_SHARE = 0.10  # ... and where the paths spend this share of the steps in them, nothing is simulated
QUEUE_FULL = 64  # ops launched on the stream and not begun when the call was made: its queue was filling


def thread_order(t: RankTrace, g: Graph) -> np.ndarray:
    """The host points in each thread's nesting order, read back from the THREAD edges between two points of one
    thread (graph.py adds them in that order, consecutive points of one thread): each edge's source, and its end
    where the next edge does not start there (a thread's last point). A hand-over from another thread (resume.py,
    also THREAD) is not part of the chain: read as one, it put its two points in the order a second time, and the
    re-timing, writing each twice, never settled (trace_diff control)."""
    te = np.flatnonzero(g.etype == THREAD)
    te = te[t.thread[g.ev[g.src[te] // 2]] == t.thread[g.ev[g.dst[te] // 2]]]
    if not len(te):
        return np.zeros(0, np.int64)
    s, d = g.src[te], g.dst[te]
    tail = np.r_[d[:-1] != s[1:], True]
    out = np.empty(len(te) + int(tail.sum()), np.int64)
    at = np.arange(len(te)) + np.r_[0, np.cumsum(tail)[:-1]]
    out[at] = s
    out[at[tail] + 1] = d[tail]
    return out


def with_queue_edges(t: RankTrace, g: Graph) -> tuple[Graph, np.ndarray]:
    """The graph plus an edge, for the simulation only, into the end of every launch call that blocked on a full
    launch queue: from the begin of the last op on the launched op's stream that began inside the call (a slot
    freed, the call returned). A call is taken as blocked where it lasted over QUEUE_CALL_NS and QUEUE_CALL_X ×
    the median launch call, with QUEUE_FULL ops or more launched on that stream and not yet begun when it was
    called. The graph has no such edge (the call's time is host time there); without it a faster device would never
    let a blocked host run earlier. Typed as sync edges (the host waits for its device), returned as a mask, so
    no scenario removes them. Linear: one pass per stream."""
    none = np.zeros(len(g.src), bool)
    le = np.flatnonzero(g.etype == LAUNCH)
    if not len(le):
        return g, none
    call, op = g.src[le] // 2, g.dst[le] // 2
    dur = g.time[2 * call + 1] - g.time[2 * call]
    long = dur > max(QUEUE_CALL_NS, QUEUE_CALL_X * median(dur))
    if not long.any():
        return g, none
    dk = np.flatnonzero(g.device)
    dstream = t.stream[g.ev[dk]]
    ostream = t.stream[g.ev[op]]
    srcs, dsts = [], []
    for s in distinct(ostream[long]).tolist():  # np.unique without its numpy.ma import (~8 ms)
        mine = ostream == s
        launched = np.sort(g.time[2 * call[mine]])
        on = dk[dstream == s]
        on = on[np.argsort(g.time[2 * on], kind="stable")]
        begins = g.time[2 * on]
        c = distinct(call[mine & long])
        cb, ce = g.time[2 * c], g.time[2 * c + 1]
        queued = np.searchsorted(launched, cb, side="left") - np.searchsorted(begins, cb, side="right")
        j = np.searchsorted(begins, ce, side="right") - 1  # the last op on the stream begun by the call's end
        ok = (queued >= QUEUE_FULL) & (j >= 0) & (begins[np.maximum(j, 0)] > cb)
        srcs.append(2 * on[j[ok]])
        dsts.append(2 * c[ok] + 1)
    src = np.concatenate(srcs)
    if not len(src):
        return g, none
    dst = np.concatenate(dsts)
    out = Graph(g.ev, g.time, g.device, np.r_[g.src, src], np.r_[g.dst, dst],
                np.r_[g.etype, np.full(len(src), SYNC_EDGE, np.int8)], np.r_[g.cause, np.full(len(src), -1, np.int8)],
                memo=g.same_points())
    return out, np.r_[none, np.ones(len(src), bool)]


def unexplained_share(g: Graph, wins) -> float:
    """The share of the steps' time that the paths setting their lengths spend in waits the trace does not explain,
    each of at least UNEXPLAINED_NS: a launch delay or stream gap (a device op launched, its stream free, that still
    began a millisecond or more later waited on something not in the trace: an untraced kernel of a CUDA graph,
    another device, an event recorded elsewhere), or an unprofiled host gap (the thread in no op: waiting on
    something, or working outside the profiled ops). The re-timing would hold such a wait fixed, which it need not
    be: where the paths hold UNEXPLAINED_SHARE of the time or more, no what-if is simulated. The paths are the
    gains' own: from each step's start back to the one before (the last step: from its end back to its start),
    along the binding edges, bounded by the node count."""
    pred_edge, pred = g.binding()
    pr = g.pred_list()
    o = g.time_order()
    ts = g.time[o]
    dev_node = np.repeat(g.device, 2)
    # the nodes whose binding edge is such a wait (a launch / stream gap, or a host gap) of at least UNEXPLAINED_NS,
    # found in numpy (times below 2**59: simulator's gate), so the walk below only follows edges
    has = pred_edge >= 0
    e = np.maximum(pred_edge, 0)
    gap = np.isin(g.etype[e], (LAUNCH, STREAM)) | ((g.etype[e] == THREAD) & (g.cause[e] == HOST_GAP))
    held_at = set(np.flatnonzero(has & gap & (g.time - g.time[np.maximum(pred, 0)] >= UNEXPLAINED_NS)).tolist())
    time = g.times()
    held = total = 0
    budget = g.nodes
    spans = [(a.start, b.start) for a, b in zip(wins, wins[1:])] + [(wins[-1].start, wins[-1].end)]
    for lo, hi in spans:
        total += max(hi - lo, 0)
        k = int(np.searchsorted(ts, hi, side="right")) - 1
        if k < 0:
            continue
        tied = o[int(np.searchsorted(ts, ts[k], side="left")):k + 1]  # a device point first among equal times
        dev = tied[dev_node[tied]]
        v = int(dev[0] if len(dev) else tied[-1])
        while time[v] > lo and budget > 0:
            budget -= 1
            u = pr[v]
            if u < 0:
                break
            if v in held_at:
                held += min(time[v], hi) - max(time[u], lo)
            v = u
    return held / total if total > 0 else 0.0


def kahn(t0: np.ndarray, u: np.ndarray, v: np.ndarray, by_time_a: np.ndarray) -> tuple[list[int], int]:
    """(a topological order of the anchors, the loops cut): anchor v waits on anchor u; Kahn's algorithm, ready
    anchors by trace time (`t0`, per anchor), a stall (a loop a skewed clock closed) cut at its earliest anchor in
    `by_time_a` (trace time, then position). Simulator._topo's where the time order is not already one."""
    n = len(by_time_a)
    indeg = np.bincount(v, minlength=n).tolist()
    o = np.argsort(u, kind="stable")
    succ = v[o].tolist()
    sb = np.searchsorted(u[o], np.arange(n + 1)).tolist()
    by_time = by_time_a.tolist()
    queued = [False] * n
    heap: list[tuple[int, int]] = []
    times = t0.tolist()
    for i in by_time:
        if indeg[i] == 0:
            heap.append((times[i], i))
            queued[i] = True
    heapq.heapify(heap)
    out: list[int] = []
    cuts = 0
    k = 0  # the next anchor in time order to cut at, where Kahn stalls
    while len(out) < n:
        if not heap:
            while queued[by_time[k]]:
                k += 1
            i = by_time[k]
            queued[i] = True
            cuts += 1
            heap.append((times[i], i))
        _, i = heapq.heappop(heap)
        out.append(i)
        for j in succ[sb[i]:sb[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0 and not queued[j]:
                queued[j] = True
                heapq.heappush(heap, (times[j], j))
    return out, cuts
