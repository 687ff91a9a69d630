"""Where a walk that left the device for a late launch goes back to it: a host that was running ahead of its device.

A device op that waited on its launch (its LAUNCH edge arrives after its stream's previous op ended) sends the walk
to the host thread that launched it, and a THREAD edge only says "this point came after the last one": the walk then
stayed on that thread back to its last recorded wait (a synchronize), counting as host time every op the thread ran
while its device was still busy with work it had launched before. On a host that runs ahead and only now and then
lets its queue drain (hta/trace_diff control.json, A100, rank 3 of 8: launch-to-kernel delay median 0.62 ms, the
device ~84 % busy) one 0.1 ms launch wait put 32 ms of the forward's host ops on the path, 22.9 of them with the
device computing: 61 % cpu_bound over the 6 steps where the compute streams sat idle behind late launches ~28 %.

The host bounded that op only from the moment it could otherwise have begun: E, when the op its stream ran before it
(or the other stream's op it waited on) ended. Before E the device held it back whatever the host did. Where that
previous op had itself queued (bound by the device, not by its launch: the host was ahead when it launched it), the
launching thread's first point at or after E takes, for the walk, that op's end as its predecessor: the walk keeps
the host's time from E to the launch, with the host's own causes (the edge stays the thread's), and goes back to
the device at E. A host behind its device (the previous op also waited on its launch, or ran as soon as launched)
keeps its chain: its own time is what the device waited on, op after op (a launch-bound loop of small kernels, a
thread idle of its own while one kernel ran: tests/unit/metrics/test_critical_path_waits.py). A point that waited
on the device itself (a SYNC or resume edge) or on another thread (a hand-over: Graph.binding) keeps its edge; one that is the return point of several ops takes the
latest E. The graph's edges are unchanged: the what-if simulation reads them, and a host faster than the trace is
not held by this. One lexsort over the device edges and a binary search per launching thread.

Not taken where the thread was busy with work of its own when the queue drained: it had a point within IDLE_MIN_NS
after E (it was running, not waiting: resume.py) and made no runtime call for IDLE_HOST_NS after E. Such a host
was not ahead but off doing something else while its device finished, and the end of that work, not the device,
set when the op could start: the device's chain before E had that much slack, and the walk stays on the thread.
kineto resnet50 num_workers=0 (V100): each step's device work ends 31-35 ms before the next step's first launch,
the main thread running the DataLoader's `__next__` all along (~800 recorded ops, no runtime call); the return
there read every step 64 % gpu_compute_bound on a host that never waited on its device. A thread silent after E
(nccl_data's main thread, blocked in loss.backward() for 17 ms with no point) keeps the return; and one still
calling the runtime within IDLE_HOST_NS (trace_diff control step 1010: a cudaStreamWaitEvent in flight at E) was
feeding its device.

Not taken in an event-sampled capture (graph.build: hta/sampled_pair keeps ~0.5 % of launches), whose stream order
joins kept ops across dropped ones, so when an op could have begun is not in the trace (the path there is no
reading of what bounds the step; docs/metrics.md).

Not read: an op that waited on another stream through an event the trace does not record (cudaStreamWaitEvent has
no stream or event in Kineto's args) and began past WAIT_TOL_NS after that stream's op ended: it reads as waiting on
its launch, and the host before it as its cause (trace_diff control step 1012: a permute kernel on stream 20 that
began 0.73 ms after its launch, behind stream 7's work).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.resume import IDLE_MIN_NS
from llmdiag.diagnose.metrics.rank.sets import distinct  # np.unique without its numpy.ma import (~7 ms)

# A thread running at E that made no runtime call for this long after it was busy with work of its own, not feeding
# its device (the docstring). idle_stretch.LONG_NS's bound: a stretch shorter than this is many launches' business.
# The returns it drops on the real traces' paths: the next runtime call 1.9 ms after E (b200_vllm: 19 Python and
# dispatch ops), 4.1-4.6 ms (nccl_data: 162 host-side foreach ops in the optimizer), 31-35 ms (resnet50
# num_workers=0: the DataLoader).
IDLE_HOST_NS = 1_000_000


def idle_returns(g, pred_edge: np.ndarray, launch: np.ndarray, thread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(host point, device end node) per return at the moment a device op could have begun but for its launch:
    the op waited on its launch (its binding edge), the op its stream ran before it (or the other stream's op it
    waited on: its latest STREAM / WAIT source) ended at E and had itself queued (the host was ahead when it
    launched that one); the launching thread's first point at or after E goes back to that op's end. `g.horder`,
    `g.hthread`: the host nodes in thread order (times non-decreasing within a thread, threads contiguous and
    ascending); `pred_edge`: the binding (Graph.binding); `launch`, `thread`: per edge, whether it is a LAUNCH /
    THREAD edge."""
    z = np.zeros(0, np.int64)
    order, th_of = g.horder, g.hthread
    if not len(order):
        return z, z
    le = np.flatnonzero(launch)
    call, op = g.src[le], g.dst[le]
    be = pred_edge[op]
    late = (be >= 0) & launch[np.maximum(be, 0)]
    call, op = call[late], op[late]
    # the op's latest STREAM / WAIT source: its in-edges from device ends other than its launch
    m = ~launch & g.device[g.src // 2] & (g.src % 2 == 1) & g.device[g.dst // 2] & (g.dst % 2 == 0)
    s, d = g.src[m], g.dst[m]
    ready = np.full(g.nodes, -1, np.int64)
    if len(s):
        o = np.lexsort((g.time[s], d))
        last = np.r_[d[o][1:] != d[o][:-1], True]
        ready[d[o][last]] = s[o][last]
    p = ready[op]
    ok = p >= 0
    call, p = call[ok], p[ok]
    launched = np.zeros(g.nodes, bool)
    launched[g.dst[le]] = True
    # the op it followed queued: launched (its launch recorded: an event-sampled capture drops most, and then
    # nothing says the host was ahead) and bound by the device, not by its launch
    pb = pred_edge[p - 1]
    ok = launched[p - 1] & (pb >= 0) & ~launch[np.maximum(pb, 0)]
    call, p = call[ok], p[ok]
    pos = np.full(g.nodes, -1, np.int64)
    pos[order] = np.arange(len(order))
    lp = pos[call]
    ok = lp >= 0
    p, lp = p[ok], lp[ok]
    if not len(p):
        return z, z
    e, th = g.time[p], th_of[lp]
    lo = np.searchsorted(th_of, th, side="left")
    otime = g.time[order]
    hp = np.empty(len(p), np.int64)
    for u in distinct(th).tolist():  # one binary search per launching thread (a few)
        sel = th == u
        a = int(lo[sel][0])
        hp[sel] = a + np.searchsorted(otime[a:int(lp[sel].max()) + 1], e[sel], side="left")
    hp = np.minimum(hp, lp)
    h = order[hp]
    hb = pred_edge[h]
    ok = (hb >= 0) & thread[np.maximum(hb, 0)] & (g.time[h] >= e)
    # ... unless the thread was running at E (a point within IDLE_MIN_NS: not waiting, resume.py) and went on with
    # no runtime call for IDLE_HOST_NS: busy with work of its own, which set when the next op could start
    ok &= (g.time[h] - e >= IDLE_MIN_NS) | (_untouched(g, order, hp, e) < IDLE_HOST_NS)
    h, p, e = h[ok], p[ok], e[ok]
    o = np.argsort(-e, kind="stable")
    h, first = np.unique(h[o], return_index=True)
    return h, p[o[first]]


def _untouched(g, order: np.ndarray, hp: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per return, how long after E (`e`) its thread went on with no runtime call: 0 where one was in flight at E,
    else from E to the next one's begin, found from the thread's first point at or after E (position `hp` in
    `order`; the late launch itself is one, at or after it). A thread without runtime calls in the graph: never
    (int64 max)."""
    rt = np.flatnonzero(g.runtime[order // 2]) if len(g.runtime) else np.zeros(0, np.int64)
    if not len(rt):
        return np.full(len(hp), np.iinfo(np.int64).max, np.int64)
    k = np.minimum(np.searchsorted(rt, hp), len(rt) - 1)
    node = order[rt[k]]
    return np.where(node % 2 == 1, 0, np.maximum(g.time[node] - e, 0))
