"""One rank's dependency graph, built from the RankTrace columns in numpy (no per-event Python).

Nodes are points in time: the begin (node 2k) and end (node 2k+1) of each selected event k (`Graph.ev[k]`):
host ops and runtime/driver calls with a duration, and kernels / memcpy / memset on the device streams.
Edges say "v could not happen before u":

- THREAD: consecutive points of one host thread in nesting order (an op's begin, its children, its end);
- DEVICE: a device op's begin -> its end;
- LAUNCH: a runtime call's begin -> the begin of the device op it launched (same correlation id);
- STREAM: a device op's end -> the begin of the next op on its stream;
- WAIT: a device op's end on another stream -> a device op that was launched and whose stream was free, that
  sat ready longer than WAIT_MIN_READY_NS, and began only when that op ended (within WAIT_TOL_NS): a
  stream-event wait (cudaStreamWaitEvent / hipStreamWaitEvent). The trace does not say which event a wait is
  on, so the edge is read from the times;
- SYNC (blocking.py): the device op launched before a blocking call (device / stream / event synchronize, a
  synchronous memcpy) that ended last inside it -> the thread's first point after it inside the call (the
  call's end, or an improperly nested parent's); for a cudaMemcpyAsync / hipMemcpyAsync, only its own copy
  ending inside it (a copy that held the host);
- RESUME (resume.py): into the point that ends a long idle gap of a host thread, from what it waited on: a device
  op that ended just before (an unrecorded synchronize; typed SYNC) or another thread that went idle just before
  (a hand-over, e.g. loss.backward() and the autograd thread; typed THREAD), or, however long before, the last
  point of a backward another thread ran while this one was silent (is_backward_op; typed THREAD).

Each edge carries a cause (CAUSES): what bounds the time from u to v when the edge is on the critical path.
The walk (Graph.binding(walk=True)) also returns from a host thread to the device where a host ahead of its device
let one op wait on its launch (ahead.py); the edges themselves stay as read.
"""

from __future__ import annotations

import re
from dataclasses import field

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.io.trace import COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, RUNTIME, SYNC, RankTrace
from llmdiag.diagnose.metrics.rank.critical_path import ahead, blocking, resume
from llmdiag.diagnose.metrics.rank.critical_path.host_order import host_points
from llmdiag.diagnose.metrics.rank.host_wait import is_sync_call
from llmdiag.diagnose.metrics.rank.idle import is_alloc_call
from llmdiag.diagnose.metrics.rank.idle_stretch import SAMPLED_SHARE, op_ids_contiguous

THREAD, DEVICE, LAUNCH, STREAM, WAIT, SYNC_EDGE = range(6)
# Tie-break between in-edges whose sources arrive at the same time: the device side wins (HTA: a kernel
# whose stream frees exactly at its launch is kernel-kernel bound, not launch bound).
PRIORITY = np.array([1, 2, 0, 3, 4, 5], np.int8)

# Fine causes, each summing into one of HTA's five categories (split.py).
CAUSES = ("host_op", "host_gap", "runtime", "allocator", "synchronize",
          "compute", "memcpy", "memset", "communication", "launch_delay", "kernel_gap", "event_wait")
C = {c: i for i, c in enumerate(CAUSES)}
# A device op beginning this soon after another stream's op ended, when it was ready before: a stream-event wait.
# Measured on the real traces (device ops ready >= 200 µs before they began, the other stream's last end before):
# 1-21 µs mostly, 54-97 µs for memsets / elementwise kernels behind a copy or a SendRecv (a100_16rank rank 0,
# trace_diff test.json: 66 µs after a SendRecv); beyond 100 µs only NCCL kernels' own start (90-200 µs) and
# waits on the host.
WAIT_TOL_NS = 100_000
# ...and only an op that sat ready longer than one stream's own gap between back-to-back ops (2-4 µs median, p99
# 15 µs where the next op was queued before the previous ended: trace_diff control / test, a100_16rank, nccl_data,
# torchrec opt_3 rank 1): one that began within it ran as soon as its stream could, and an op on another stream
# ending just before was chance. On a busy device two streams' µs kernels interleave, and every such chance edge
# bound (it arrives after the stream's own) and sent the walk across streams (trace_diff test.json step 1012: a
# CUDA-graph backward on stream 7 read as waiting on stream 14's scans, and through their late launch, on the
# main thread's 39 ms wait for that same backward).
WAIT_MIN_READY_NS = 20_000

DEVICE_KINDS = (COMPUTE, COMM, MEMCPY, MEMSET)


@dataclass
class Graph:
    """Nodes 2k / 2k+1: begin / end of event ev[k]; edges src -> dst with their type and cause."""

    ev: np.ndarray  # int64 event index per selected event
    time: np.ndarray  # int64 ns per node
    device: np.ndarray  # bool per selected event
    src: np.ndarray  # int64 node per edge
    dst: np.ndarray
    etype: np.ndarray  # int8 edge type
    cause: np.ndarray  # int8 index into CAUSES
    # the walk's returns to the device (ahead.py): the host nodes in thread order and their thread (host_points)
    horder: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hthread: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    runtime: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per selected event: a runtime call
    # what several passes of one rank read from the same arrays (the walk, the what-ifs' gate, their boundaries):
    # computed once (`time_order`, `times`, the binding's edges); the arrays are never edited once built
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def nodes(self) -> int:
        return len(self.time)

    def time_order(self) -> np.ndarray:
        """The nodes in time order (stable: equal times in node order), sorted once per graph."""
        o = self.memo.get("order")
        if o is None:
            o = self.memo["order"] = np.argsort(self.time, kind="stable")
        return o

    def times(self) -> list[int]:
        """`time` as a Python list (a walk reads one node at a time: a list indexes ~10x faster than numpy)."""
        o = self.memo.get("times")
        if o is None:
            o = self.memo["times"] = self.time.tolist()
        return o

    def same_points(self) -> dict:
        """The memo entries that depend on the points alone, for a graph of the same points with more edges."""
        return {k: v for k, v in self.memo.items() if k in ("order", "times")}

    def binding(self, walk: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Per node, the in-edge whose source arrives last (-1 for none), and that source. The edge a node
        waited on: the others had slack. One lexsort over the edges. With `walk` (the critical path's walk, not the
        what-if simulation, whose host chains keep their edges), a host thread's point where a walk that left the
        device for a late launch returns to it goes back to that device op's end instead, its edge (its cause) kept
        (ahead.py: the host was ahead of its device until then)."""
        pred_edge = self.memo.get("pred_edge")
        if pred_edge is None:  # the same edges for the walk and the what-ifs: one lexsort per graph
            pred_edge = self.memo["pred_edge"] = self._pred_edge()
        pred = np.where(pred_edge >= 0, self.src[np.maximum(pred_edge, 0)], -1)
        if walk and len(self.src):
            h, p = self._returns(pred_edge)
            pred[h] = p
        return pred_edge, pred

    def _returns(self, pred_edge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The walk's returns to the device (ahead.idle_returns): (host point, device end node), once per graph."""
        r = self.memo.get("returns")
        if r is None:
            # a hand-over (a THREAD edge across threads: resume.py) is a wait like a SYNC edge: its point keeps it
            thr = np.full(self.nodes, -1, np.int64)
            thr[self.horder] = self.hthread
            own = (self.etype == THREAD) & (thr[self.src] == thr[self.dst])
            r = self.memo["returns"] = ahead.idle_returns(self, pred_edge, self.etype == LAUNCH, own)
        return r

    def pred_list(self, walk: bool = False) -> list[int]:
        """binding(walk)'s sources as a Python list (-1 none), made once per graph and never edited: the walks
        read them one node at a time. The walk's is the other's with its few returns (ahead.py) written over."""
        key = "walk_preds" if walk else "preds"
        out = self.memo.get(key)
        if out is None:
            if not walk:
                out = self.binding()[1].tolist()
            else:
                out = self.pred_list().copy()
                if len(self.src):
                    for a, b in zip(*(x.tolist() for x in self._returns(self.binding()[0]))):
                        out[a] = b
            self.memo[key] = out
        return out

    def _pred_edge(self) -> np.ndarray:
        pred_edge = np.full(self.nodes, -1, np.int64)
        if len(self.src):
            ts = self.time[self.src]
            if np.abs(ts).max() < 2**59:  # one key: arrival, then the tie-break
                # per node the largest key, of equal keys the last edge: the last of a lexsort on (node, key),
                # without the sort (~3x faster)
                key = ts * 8 + PRIORITY[self.etype]
                best = np.full(self.nodes, np.iinfo(np.int64).min, np.int64)
                np.maximum.at(best, self.dst, key)
                cand = np.flatnonzero(key == best[self.dst])
                np.maximum.at(pred_edge, self.dst[cand], cand)
            else:  # times a hostile trace stretched past what one int64 key holds
                o = np.lexsort((PRIORITY[self.etype], ts, self.dst))
                last = np.r_[self.dst[o][1:] != self.dst[o][:-1], True]
                pred_edge[self.dst[o][last]] = o[last]
        pred_edge.flags.writeable = False  # shared by every caller (memo)
        return pred_edge


def _kinds(t: RankTrace) -> np.ndarray:
    return t.kind if t.kind is not None else np.full(len(t), -1, np.int8)


def build(t: RankTrace) -> Graph:
    """The dependency graph of a classified GPU trace."""
    kind = _kinds(t)
    host = (t.stream < 0) & np.isin(kind, (CPU_OP, RUNTIME, SYNC)) & (t.dur > 0)
    dev = (t.stream >= 0) & np.isin(kind, DEVICE_KINDS) & (t.dur >= 0)
    ev = np.flatnonzero(host | dev)
    is_dev = dev[ev]
    begin, end = t.ts[ev], t.ts[ev] + t.dur[ev]
    time = np.empty(2 * len(ev), np.int64)
    time[0::2], time[1::2] = begin, end
    srcs: list = []
    dsts: list = []
    types: list = []
    causes: list = []

    def add(s, d, ty, ca) -> None:
        srcs.append(np.asarray(s, np.int64))
        dsts.append(np.asarray(d, np.int64))
        types.append(np.full(len(srcs[-1]), ty, np.int8))
        causes.append(np.broadcast_to(np.asarray(ca, np.int8), (len(srcs[-1]),)).astype(np.int8))

    hk = np.flatnonzero(~is_dev)  # selected-event positions of host events
    order = host_points(t, ev, hk, begin, end) if len(hk) else None
    idle = _thread_edges(t, ev, hk, order, add)
    dk = np.flatnonzero(is_dev)
    dkind = kind[ev[dk]]
    span_cause = np.select([dkind == COMM, dkind == MEMCPY, dkind == MEMSET], [C["communication"], C["memcpy"],
                           C["memset"]], C["compute"]).astype(np.int8)
    add(2 * dk, 2 * dk + 1, DEVICE, span_cause)
    launch_of = _launch_edges(t, ev, hk, dk, add)
    stream_pred = _stream_edges(t, ev, dk, begin, end, add)
    _wait_edges(t, ev, dk, begin, end, launch_of, stream_pred, add)
    launched = np.where(launch_of >= 0, begin[np.maximum(launch_of, 0)], np.iinfo(np.int64).min)
    if order is not None and len(dk):
        s, d, free = blocking.sync_edges(t, ev, hk, dk, begin, end, launched, order[0], order[1])
        add(s, d, SYNC_EDGE, np.where(free, C["allocator"], C["synchronize"]))
    lag = resume.clock_lag(launched, begin[dk])
    _resume_edges(time, dk, launched, lag, idle, t.thread[ev[launch_of[launch_of >= 0]]], add,
                  2 * hk[t.name_mask(is_backward_op)[ev[hk]]])
    z = np.zeros(0, np.int64)
    # An event-sampled capture (hta/sampled_pair: ~0.5 % of launches kept) joins kept ops by stream order across
    # the dropped ones: when an op could have begun is not in it, so the walk takes no returns there (ahead.py).
    share = op_ids_contiguous(t)
    sampled = share is not None and share < SAMPLED_SHARE
    ho, ht = (order[0], order[1].astype(np.int64)) if order is not None and not sampled else (z, z)
    rt = ~is_dev & np.isin(kind[ev], (RUNTIME, SYNC))
    if not srcs:
        return Graph(ev, time, is_dev, z, z, z.astype(np.int8), z.astype(np.int8), ho, ht, rt)
    return Graph(ev, time, is_dev, np.concatenate(srcs), np.concatenate(dsts), np.concatenate(types),
                 np.concatenate(causes), ho, ht, rt)


def _thread_edges(t: RankTrace, ev, hk, order, add):
    """THREAD edges with their cause: the innermost host event open between the two points (none: a gap
    between top-level ops, where nothing was profiled). Returns the gaps and each thread's last point:
    (gap src nodes, gap dst nodes, first nodes, last nodes, thread per node), None without host events.
    `order`: host_points."""
    if order is None:
        return None
    nodes, th, step = order
    same = th[1:] == th[:-1]
    # depth after each point, per thread
    cs = np.cumsum(step)
    first = np.r_[True, ~same]
    base = np.maximum.accumulate(np.where(first, np.arange(len(cs)), 0))
    depth = cs - (cs[base] - step[base])
    # innermost open event after point j: the last begin at or before j with the same depth after it
    pos = np.arange(len(nodes))
    # (thread, depth) groups, positions in order within each: a stable sort on a 16-bit key where it fits (numpy
    # radix-sorts those: linear), else on thread * (len + 2) + depth
    lo, span = int(depth.min()), int(depth.max() - depth.min()) + 1
    t0 = int(th.min())
    if (int(th.max()) - t0 + 1) * span <= 1 << 16:
        grp = ((th.astype(np.int64) - t0) * span + (depth - lo)).astype(np.uint16)
    else:
        grp = th.astype(np.int64) * (len(nodes) + 2) + depth
    o = np.argsort(grp, kind="stable")
    big = len(nodes) + 1
    gr = np.cumsum(np.r_[True, grp[o][1:] != grp[o][:-1]])  # group rank, increasing along o
    val = np.where(step[o] == 1, pos[o], -1) + gr * big
    last_begin = np.maximum.accumulate(val) - gr * big
    open_at = np.empty(len(nodes), np.int64)
    open_at[o] = last_begin  # position of the innermost open event's begin, -1 if none in this group
    j = np.flatnonzero(same)
    opener = open_at[j]
    gap = (depth[j] <= 0) | (opener < 0)
    k_open = nodes[np.maximum(opener, 0)] // 2  # selected-event position of that event
    cause = _host_cause(t, ev[k_open])
    cause[gap] = C["host_gap"]
    add(nodes[j], nodes[j + 1], THREAD, cause)
    thread_of = np.full(2 * len(ev), -1, np.int64)
    thread_of[nodes] = th
    inop = cause == C["host_op"]
    return (nodes[j[gap]], nodes[j[gap] + 1], nodes[first], nodes[np.r_[~same, True]], thread_of,
            nodes[j[inop]], nodes[j[inop] + 1])


def _resume_edges(time, dk, launched, lag: int, idle, launching: np.ndarray, add, bw: np.ndarray) -> None:
    """RESUME edges into the points that end a long idle gap of a host thread (resume.py). Only threads that
    launched device work (`launching`: their thread ids) take part: a thread that never drives the device (a
    data loader's, a pin-memory poller's) wakes on its own clock, and a wake-up near an unrelated kernel's end or
    another thread's pause would be chance. `bw`: the begin nodes of the autograd engine's ops (is_backward_op),
    the evidence that a thread silent through another's backward was blocked in it (resume.backward_handoff)."""
    if idle is None:
        return
    gs, gd, first, last, thread_of, os_, od = idle
    drives = np.zeros(int(max(thread_of.max(initial=0), launching.max(initial=0))) + 1, bool)
    drives[launching] = True

    def drv(nodes: np.ndarray) -> np.ndarray:  # host nodes only: their thread is set
        return drives[thread_of[nodes]]

    long_ = resume.idle_resumes(time, gs, gd) & drv(gd)
    gs, gd = gs[long_], gd[long_]
    first, last = first[drv(first)], last[drv(last)]
    woke = np.concatenate([gd, first])  # a thread's first point: idle since the capture began
    since = np.concatenate([time[gs], np.full(len(first), np.iinfo(np.int64).min)])
    quiet_from = np.concatenate([gs, last])
    quiet_to = np.concatenate([gd, np.full(len(last), -1, np.int64)])
    hs, hd = resume.handoff(time, thread_of, quiet_from, quiet_to, woke)
    bs, bd = resume.backward_handoff(time, thread_of, quiet_from, quiet_to, gd, time[gs], bw[drv(bw)])
    add(np.concatenate([hs, bs]), np.concatenate([hd, bd]), THREAD, C["host_gap"])
    # A wake-up another thread explains within the tolerance is not read as a device wait: on a busy device some
    # op always ends within the tolerance before it. One after a backward may still have waited on the device
    # once backward returned (a synchronize unrecorded): both edges, the later source binds.
    left = ~np.isin(woke, hd)
    quiet = resume.idle_resumes(time, os_, od) & drv(od)  # silent inside an op: blocked in it, or its own work
    s, d = resume.device_resume(time, 2 * dk + 1, launched, np.concatenate([since[left], time[os_[quiet]]]),
                                np.concatenate([woke[left], od[quiet]]), lag)
    add(s, d, SYNC_EDGE, C["synchronize"])


def is_backward_op(name: str) -> bool:
    """An op only the autograd engine runs: its per-node wrapper (`autograd::engine::evaluate_function: ...`,
    PyTorch >= 1.10), a backward node itself (`ConvolutionBackward0`, `NllLossBackward` in 2021's Kineto) or
    AccumulateGrad. A thread running one ran a backward."""
    return name.startswith("autograd::engine::evaluate_function") or name.startswith("torch::autograd::Accumulate") \
        or _BACKWARD_NODE.search(name) is not None


_BACKWARD_NODE = re.compile(r"^[A-Za-z_:]*Backward\d*$")


def _host_cause(t: RankTrace, evs: np.ndarray) -> np.ndarray:
    kind = _kinds(t)[evs]
    out = np.full(len(evs), C["host_op"], np.int8)
    rt = kind == RUNTIME
    out[rt] = C["runtime"]
    alloc = np.zeros(len(t.names), bool)
    alloc[t.name_ids(is_alloc_call)] = True
    sync = np.zeros(len(t.names), bool)
    sync[t.name_ids(is_sync_call)] = True
    nm = t.name[evs]
    out[rt & alloc[nm]] = C["allocator"]
    out[sync[nm] | (kind == SYNC)] = C["synchronize"]
    return out


def _launch_edges(t: RankTrace, ev, hk, dk, add) -> np.ndarray:
    """LAUNCH edges; returns per device event (dk order) the selected position of its launch, -1 if none."""
    launch_of = np.full(len(dk), -1, np.int64)
    hc = t.corr[ev[hk]]
    rt = (_kinds(t)[ev[hk]] == RUNTIME) & (hc >= 0)
    hr, hcr = hk[rt], hc[rt]
    if not len(hr) or not len(dk):
        return launch_of
    o = np.argsort(hcr, kind="stable")
    hr, hcr = hr[o], hcr[o]
    dc = t.corr[ev[dk]]
    i = np.minimum(np.searchsorted(hcr, dc), len(hcr) - 1)
    ok = (hcr[i] == dc) & (dc >= 0)
    launch_of[ok] = hr[i[ok]]
    add(2 * launch_of[ok], 2 * dk[ok], LAUNCH, C["launch_delay"])
    return launch_of


def _stream_edges(t: RankTrace, ev, dk, begin, end, add) -> np.ndarray:
    """STREAM edges; returns per device event (dk order) the selected position of its stream predecessor."""
    pred = np.full(len(dk), -1, np.int64)
    if len(dk) < 2:
        return pred
    st = t.stream[ev[dk]]
    o = np.lexsort((end[dk], begin[dk], st))
    same = st[o][1:] == st[o][:-1]
    a, b = o[:-1][same], o[1:][same]
    pred[b] = dk[a]
    add(2 * dk[a] + 1, 2 * dk[b], STREAM, C["kernel_gap"])
    return pred


def _wait_edges(t: RankTrace, ev, dk, begin, end, launch_of, stream_pred, add) -> None:
    """WAIT edges: a device op that was ready (launched, its stream free) but began only right after an op on
    another stream ended."""
    if len(dk) < 2:
        return
    st = t.stream[ev[dk]]
    ready = np.maximum(np.where(launch_of >= 0, begin[np.maximum(launch_of, 0)], -2**62),
                       np.where(stream_pred >= 0, end[np.maximum(stream_pred, 0)], -2**62))
    o = np.argsort(end[dk], kind="stable")
    ends, est = end[dk][o], st[o]
    run_start = np.maximum.accumulate(np.where(np.r_[True, est[1:] != est[:-1]], np.arange(len(o)), 0))
    b = begin[dk]
    j = np.searchsorted(ends, b, side="right") - 1
    j = np.where((j >= 0) & (est[np.maximum(j, 0)] == st), run_start[np.maximum(j, 0)] - 1, j)
    ok = (j >= 0) & (ready > -2**62)
    jj = np.maximum(j, 0)
    ok &= (ends[jj] > ready) & (b - ends[jj] <= WAIT_TOL_NS) & (est[jj] != st) & (b - ready > WAIT_MIN_READY_NS)
    add(2 * dk[o[jj[ok]]] + 1, 2 * dk[ok], WAIT, C["event_wait"])
