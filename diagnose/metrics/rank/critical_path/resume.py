"""What a host thread waited on through an idle gap: RESUME edges into the point that ends it.

A thread with nothing recorded for a long time (no op of the graph open: a Python wait, a loss.backward() handing
the work to the autograd thread, a blocking call the profiler did not record) was waiting on something, not busy;
a THREAD edge across that gap says only "this point came after the last one", and on the critical path it becomes
an unprofiled host gap that hides what the thread really waited on. Two waits are read from the times:

- the device: the thread resumed within RESUME_TOL_NS (plus the device clock's lag behind the host's, clock_lag)
  after a device op it had launched before ended (an unrecorded synchronize, e.g. an event polled or waited on
  from Python): an edge from that op's end, cause `synchronize`;
- another thread: the thread resumed within HANDOFF_TOL_NS after another thread's last point before that thread
  itself went idle past the resume (it handed the work over: loss.backward() waking the autograd thread, its
  end waking the main thread): an edge from that point, cause `host_gap` (the hand-over is not profiled);
- a backward another thread ran (backward_handoff): the thread silent through it was blocked in loss.backward()
  (another launching thread began an autograd engine op inside its gap) and waited on that thread's last point
  before the resume, however long after it resumed: the tolerance above is a guess at a wake-up's latency, and
  the main thread's resume after backward includes its own untraced Python (nccl_data: 1.50-1.67 ms, the optimizer
  step's Python before its first op). Same edge, same cause; the time after the point is the waiting thread's.
  Assumed: one training loop per process (two threads each running its own backward would read as waiting on each
  other). Kineto's `fwdbwd` flows and `Fwd thread id` args would say whose backward it was; the loader keeps neither.

A thread silent as long inside an open host op (nothing recorded under it) is read the same way for the device
only: the op's time was a wait where its next point came right after a device op ended (torchrec
sst_sleep_pl_dense_after_backward_2 ranks 0, 1, 3: an `aten::cat` silent for 1.0 s until 54 µs after the
all-to-all waiting on the sleeping rank 2 ended, then `cudaFree`), its own work otherwise.
A wake-up with a hand-over gets no device edge: on a busy device some op always ends just before it. Only threads
that launch device work take part (graph.py), as the thread that wakes and the one that hands over. Both need the
gap to be long (IDLE_MIN_NS): a short one is the thread's own untraced Python between two ops. A thread's first
recorded point counts as the end of one (idle since the capture began: an autograd thread's first backward op,
woken by loss.backward()).

Measured in the real traces (tests/unit/metrics/test_critical_path_waits.py names them): torchrec
sst_long_a2a_optimizer_3 rank 2's main thread resumes 50 µs after the embedding-update kernel it waited on (the
recorded synchronize calls that blocked return 1-52 µs after the device op they waited on, p90 10-49 µs, in
a100_16rank, trace_diff control / test, opt_3 / opt_5 rank 2, mi300_ddp8, nccl_data); its main thread resumes
181 µs after the autograd thread's last launch, the autograd thread 190 µs after the main thread's `ones_like`;
trace_diff's autograd threads start 185-462 µs after the main thread's `ones_like`; kineto resnet50's main thread
79-133 µs after the autograd thread's last AccumulateGrad. The edge arrives last, so it binds; without one the
point keeps its THREAD edge. One sort and a few searchsorted passes over the gaps.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.sets import distinct  # np.unique without its numpy.ma import

IDLE_MIN_NS = 1_000_000  # a thread idle this long was waiting, not running untraced code between two ops
RESUME_TOL_NS = 60_000  # a blocking call's return after the device op it waited on: 1-52 µs in 7 real traces
HANDOFF_TOL_NS = 1_000_000  # another thread's wake-up after the one that handed over went idle: 0.2-0.5 ms measured
HANDOFF_LOOKBACK = 4  # candidates checked per resume (other threads going idle just before it)
# A device clock ahead of the host's shows in no launch (an op still begins after its launch), so a wake-up may
# read a few µs before the end it waited on: torchrec sst_long_a2a_optimizer_5_qcomm rank 1's main thread, idle
# 59 ms, wakes 5 µs before the embedding update kernel it waited on ends (its kernels begin >= 2 µs after launch).
CLOCK_NOISE_NS = 10_000
LAG_CAP_NS = 500_000  # the most device-clock lag trusted (a bogus correlation must not widen every tolerance)
CAUSAL_LOOKBACK = 8  # device ends checked per wait, latest first, for one launched before the wait


def idle_resumes(time: np.ndarray, gap_src: np.ndarray, gap_dst: np.ndarray) -> np.ndarray:
    """Mask of the idle gaps (THREAD edges gap_src -> gap_dst with no op open) long enough to be a wait."""
    return (time[gap_dst] - time[gap_src]) >= IDLE_MIN_NS


def latest_launched_end(ends: np.ndarray, launched: np.ndarray, at: np.ndarray, after: np.ndarray,
                        before: np.ndarray) -> np.ndarray:
    """Per query, the position in `ends` (device op ends, sorted) of the latest end at or before `at` and after
    `after` whose op was launched at or before `before` (a synchronous copy launches its own; `launched`, per
    position: its launch call's begin, int64 min when unknown); -1 for none. What a host point waited on was
    enqueued before it waited: a device clock running behind the host's (CUPTI skew: kernels beginning up to
    50 µs before their launch in the torchrec V100 traces) puts ops launched after the wait inside it, and an
    edge from one closes a loop of binding edges (the op's launch comes after the wait's end: the walk went
    round it until its budget ran out, then counted the rest of the step as an unprofiled host gap; torchrec
    sst_long_a2a_optimizer_5 rank 0, step 5: 114 of 126 ms). CAUSAL_LOOKBACK candidates, latest first."""
    best = np.full(len(at), -1, np.int64)
    if not len(ends):
        return best
    last = np.searchsorted(ends, at, side="right") - 1
    for k in range(CAUSAL_LOOKBACK):
        j = last - k
        jj = np.maximum(j, 0)
        ok = (best < 0) & (j >= 0) & (ends[jj] > after) & (launched[jj] <= before)
        best[ok] = jj[ok]
    return best


def clock_lag(launched: np.ndarray, dev_begin: np.ndarray) -> int:
    """How far the device clock lags the host's, at least (ns, capped at LAG_CAP_NS): the most a device op began
    before its launch call began. No op can begin before it is launched, so that much is the clocks'. CUPTI's
    device timestamps lag by 15-50 µs throughout the torchrec V100 traces (sst_long_a2a_optimizer_3 rank 1:
    kernels beginning up to 50 µs before their launch); 0 on the HTA and kineto traces."""
    known = launched > np.iinfo(np.int64).min
    if not known.any():
        return 0
    return int(min(max(int((launched[known] - dev_begin[known]).max()), 0), LAG_CAP_NS))


def device_resume(time: np.ndarray, dev_end_nodes: np.ndarray, launched: np.ndarray, since: np.ndarray,
                  dst: np.ndarray, lag: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(device end node, resume node) for each idle gap (the thread idle from `since`, ns, to the point `dst`)
    that ended within RESUME_TOL_NS after a device op ended inside the gap (plus `lag`, the device clock's lag:
    the op really ended that much later than its timestamp), launched before the point: the latest such end, up
    to CLOCK_NOISE_NS after the point by the timestamps.
    `launched`: per device end node, its launch's begin (int64 min unknown)."""
    if not len(dev_end_nodes) or not len(dst):
        z = np.zeros(0, np.int64)
        return z, z
    o = np.argsort(time[dev_end_nodes], kind="stable")
    ends, en = time[dev_end_nodes][o], dev_end_nodes[o]
    r = time[dst]
    # launched before the point, not at it: the point may be the call launching the op (a synchronous copy)
    j = latest_launched_end(ends, launched[o], r + CLOCK_NOISE_NS, np.maximum(since, r - RESUME_TOL_NS - lag - 1),
                            r - 1)
    ok = j >= 0
    return en[j[ok]], dst[ok]


def handoff(time: np.ndarray, thread_of: np.ndarray, quiet_from: np.ndarray, quiet_to: np.ndarray,
            dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(point, resume node) for each resume `dst` within HANDOFF_TOL_NS after another thread's point at which it
    went idle (`quiet_from`, its next point `quiet_to`, -1 for none) and stayed idle past the resume: the latest
    such point among the HANDOFF_LOOKBACK going idle last before the resume. `thread_of` is per node."""
    r = time[dst]
    return _latest_idle(time, thread_of, quiet_from, quiet_to, dst, lambda qf, qt: qt >= r - HANDOFF_TOL_NS)


def backward_handoff(time: np.ndarray, thread_of: np.ndarray, quiet_from: np.ndarray, quiet_to: np.ndarray,
                     dst: np.ndarray, since: np.ndarray, bw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(point, resume node) for each resume `dst` of a thread idle since `since` (ns) that was blocked in a
    backward another thread ran: that thread began an autograd engine op (`bw`: their begin nodes, graph.py's
    is_backward_op) after `since` and went idle at a point (`quiet_from`, its next point `quiet_to`, -1 none) after
    that op and before the resume, staying idle past it. loss.backward() returns only once the engine's thread has
    run the whole backward, so the caller waited on that thread's last point however long it then took to
    resume (nccl_data: 1.67 ms, past HANDOFF_TOL_NS); the time from that point to the resume is the caller's own.
    The latest such point among the HANDOFF_LOOKBACK going idle last before the resume."""
    if not len(bw):
        z = np.zeros(0, np.int64)
        return z, z
    # the backward ops' begins by (thread, time): how many a thread began in (since, its idle point]
    bth, btime = thread_of[bw], time[bw]
    ob = np.lexsort((btime, bth))
    bth, btime = bth[ob], btime[ob]
    return _latest_idle(time, thread_of, quiet_from, quiet_to, dst,
                        lambda qf, qt: (qt > since) & _begun_in(bth, btime, thread_of[qf], since, qt))


def _latest_idle(time: np.ndarray, thread_of: np.ndarray, quiet_from: np.ndarray, quiet_to: np.ndarray,
                 dst: np.ndarray, fits) -> tuple[np.ndarray, np.ndarray]:
    """(point, resume node) per resume `dst`: the latest, among the HANDOFF_LOOKBACK points going idle last
    before it, at which another thread went idle (`quiet_from`, its next point `quiet_to`, -1 none) and stayed
    idle past the resume, and which `fits(point, its time)` (a mask per resume) accepts."""
    z = np.zeros(0, np.int64)
    if not len(quiet_from) or not len(dst):
        return z, z
    o = np.argsort(time[quiet_from], kind="stable")
    qf, qt = quiet_from[o], quiet_to[o]
    qtime = time[qf]
    qnext = np.where(qt >= 0, time[np.maximum(qt, 0)], np.iinfo(np.int64).max)
    r = time[dst]
    last = np.searchsorted(qtime, r, side="right") - 1
    best = np.full(len(dst), -1, np.int64)
    for k in range(HANDOFF_LOOKBACK):  # latest first: keep the first that fits
        j = last - k
        jj = np.maximum(j, 0)
        ok = (best < 0) & (j >= 0) & (thread_of[qf[jj]] != thread_of[dst]) & (qnext[jj] > r)
        ok &= fits(qf[jj], qtime[jj])
        best[ok] = jj[ok]
    ok = best >= 0
    return qf[best[ok]], dst[ok]


def _begun_in(bth: np.ndarray, btime: np.ndarray, u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per query, whether thread u[i] began an op in (lo[i], hi[i]]; `bth`, `btime` sorted by (thread, time).
    One binary search per thread asked about (a few)."""
    out = np.zeros(len(u), bool)
    for v in distinct(u).tolist():
        a, b = np.searchsorted(bth, v, side="left"), np.searchsorted(bth, v, side="right")
        if a == b:
            continue
        sel = u == v
        tt = btime[a:b]
        out[sel] = np.searchsorted(tt, hi[sel], side="right") > np.searchsorted(tt, lo[sel], side="right")
    return out
