"""The critical path of each step: from the step's last node back along the edge each node waited on last.

Every edge weighs the time between its two points, so the longest path through a step is as long as the step
itself, and the question is only which dependency each point waited on: the in-edge whose source arrived last
(the others had slack; Graph.binding). Walking those back from the step's last point tiles the step's time with
segments, each with the cause of its edge. A point with no recorded dependency (the first op of a thread, a
kernel launched before the capture) goes on from what the device was doing then (Walker.device_at: an op in
flight, or one ending within a back-to-back gap before, the gap counted kernel-kernel): a busy device's time
before it is the device's (torchrec sst_long_a2a_optimizer_5_qcomm rank 0, step 4: a kernel launched before the
capture, 56 ms into a step the device was 98 % busy, ended the walk and the 56 ms read as a host gap). Only with
the device idle there is the rest of the step an unprofiled host gap.
The walk visits only the path's own nodes; the graph and the binding edges are numpy passes over the events.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES, WAIT_MIN_READY_NS, Graph, build
from llmdiag.diagnose.metrics.rank.critical_path.hta import HtaRank
from llmdiag.diagnose.metrics.rank.critical_path.split import split, split_hta
from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.model.chores import RankChores
from llmdiag.diagnose.model.critical_path import (CriticalPath, RankCriticalPath, TypicalStep, sampled_note,
                                                  typical_step)

HOST_GAP = CAUSES.index("host_gap")
KERNEL_GAP = CAUSES.index("kernel_gap")
# A device op ending this close before a window's end ran up to it (one stream's own gap between back-to-back ops,
# graph.py's WAIT_MIN_READY_NS): the walk starts there, not at the next step's first op beginning at the end.
SINK_TOL_NS = WAIT_MIN_READY_NS
IN_FLIGHT_LOOKBACK = 32  # device ops checked back from a window's end for one still running


def _running_argmax(a: np.ndarray) -> np.ndarray:
    """Per position, the index of the largest value at or before it (the first of equals)."""
    if not len(a):
        return np.zeros(0, np.int64)
    best = np.maximum.accumulate(a)
    idx = np.where(a == best, np.arange(len(a)), 0)
    return np.maximum.accumulate(idx)


class Walker:
    """The binding edge of every node of a graph, as Python lists: the walk reads one node at a time, and a list
    indexes ~10x faster than a numpy scalar."""

    def __init__(self, g: Graph):
        self.g = g
        pred_edge = g.binding()[0]
        self.dev_end = np.zeros(g.nodes, bool)
        self.dev_end[1::2] = g.device
        self.cause = np.where(pred_edge >= 0, g.cause[np.maximum(pred_edge, 0)], -1)  # numpy too: walks.py
        # per node: its time, its binding edge's source (-1 none) and that edge's cause, read by walks.Walks too
        self.times, self.preds = g.times(), g.pred_list(walk=True)
        self._order = np.zeros(0, np.int64)
        self.crossed = -1  # set by walk
        self._ready = False
        self._sorted = g.time
        self._dbegin = self._dend = self._dnode = self._dmax = self._eend = self._enode = self._ebegin = \
            np.zeros(0, np.int64)

    def sink(self, end: int) -> int:
        """The node a walk back from `end` starts at: a device op ending at `end`; else the device op in flight
        at `end` (its end node: the walk counts [its begin, end] as its cause); else the last node before `end`
        (a device op's end first among equal times); -1 none. A window clipped where the next step's device
        work begins (steps.py) ends with the device mid-kernel while the host runs ahead enqueueing the next
        step: the last node before it is then a host point, and a walk from there read the busy device's time as
        host time (torchrec sst_long_a2a_optimizer_3 rank 1, step 5: 16 ms of the autograd thread's ops while
        its compute stream ran without a gap)."""
        self._prepare()
        k = int(np.searchsorted(self._sorted, end, side="right")) - 1
        if k < 0:
            return -1
        lo = int(np.searchsorted(self._sorted, self._sorted[k], side="left"))
        tied = self._order[lo:k + 1]
        dev = tied[self.dev_end[tied]]
        if len(dev) and self._sorted[k] == end:
            return int(dev[0])
        busy = self.device_at(end)
        if busy >= 0:
            return busy
        return int(dev[0] if len(dev) else tied[-1])

    def _prepare(self) -> None:
        if not self._ready:  # sorted once, on the first window
            self._ready = True
            self._order = self.g.time_order()
            self._sorted = self.g.time[self._order]
            dev = np.flatnonzero(self.g.device)
            o = dev[np.argsort(self.g.time[2 * dev], kind="stable")]
            self._dbegin, self._dend = self.g.time[2 * o], self.g.time[2 * o + 1]
            self._dnode = 2 * o + 1
            self._dmax = _running_argmax(self._dend)
            e = dev[np.argsort(self.g.time[2 * dev + 1], kind="stable")]
            self._eend, self._enode, self._ebegin = self.g.time[2 * e + 1], 2 * e + 1, self.g.time[2 * e]

    def device_at(self, at: int) -> int:
        """The end node of what the device was doing at `at`: an op in flight (begun before, ending after), else
        the last op that ended within SINK_TOL_NS before it (begun before it); -1 with the device idle."""
        self._prepare()
        flying = self._in_flight(at)
        if flying >= 0:
            return flying
        j = int(np.searchsorted(self._eend, at, side="right")) - 1
        if j >= 0 and at - self._eend[j] <= SINK_TOL_NS and self._ebegin[j] < at:
            return int(self._enode[j])
        return -1

    def _in_flight(self, at: int) -> int:
        """The end node of a device op running at `at` (begun before it, ending after): the latest begun among
        the IN_FLIGHT_LOOKBACK begun last, else the one ending last; -1 none."""
        j = int(np.searchsorted(self._dbegin, at, side="left")) - 1
        for i in range(j, max(j - IN_FLIGHT_LOOKBACK, -1), -1):
            if self._dend[i] > at:
                return int(self._dnode[i])
        if j >= 0 and self._dend[m := int(self._dmax[j])] > at:
            return int(self._dnode[m])
        return -1

    def walk(self, start: int, end: int, segs: list | None = None, top: int = -1) -> np.ndarray:
        """Nanoseconds per cause (CAUSES order) of the path tiling [start, end] back from its last node (`top`
        where given: a node at or after `end`, whose binding edge the walk follows from `end`; else sink(end));
        the segments (t0, t1, cause), latest first, appended to `segs` when given. Sets `crossed`: the node whose
        binding edge crosses `start` (the next walk back, of the window ending at `start`, goes on from it), -1
        where the walk ended in a gap with no recorded dependency."""
        acc = [0] * len(CAUSES)
        self.crossed = -1
        v = top if top >= 0 else self.sink(end)
        if end <= start:
            return np.array(acc, np.int64)
        if v < 0:
            acc[HOST_GAP] = end - start
            return np.array(acc, np.int64)
        time, pred = self.times, self.preds
        c = c0 = max(min(time[v], end), start)  # a window with no node in it: all of it a gap, not more
        acc[HOST_GAP] += end - c
        budget = len(time)  # a hostile trace's times can close a loop of binding edges: never walk one forever
        # The loop only follows the edges; what each step adds is summed in numpy once it ends (_steps). Step i
        # goes from nodes[i] to nodes[i + 1] over the time the walk carried (a running min), its cause the binding
        # edge's, or kernel_gap where the walk went on from what the device was doing (steps in `jumps`).
        nodes, jumps, rest = [v], [], None
        while c > start:
            u = pred[v]
            budget -= 1
            if u < 0 and budget >= 0 and (u := self.device_at(c)) >= 0:  # no recorded dependency: the device's
                jumps.append(len(nodes) - 1)
            elif u < 0 or budget < 0:
                rest = c  # the rest of the window an unprofiled host gap
                break
            nodes.append(u)
            if time[u] < c:
                c = time[u]
            v = u
        out = np.array(acc, np.int64)
        if len(nodes) > 1:
            self._steps(nodes, jumps, c0, start, out, segs)
        if rest is not None:
            out[HOST_GAP] += rest - start
            if segs is not None:
                segs.append((start, rest, HOST_GAP))
        return out

    def _steps(self, nodes: list[int], jumps: list[int], c0: int, start: int, out: np.ndarray,
               segs: list | None) -> None:
        """Walk's steps summed per cause into `out` (segments appended to `segs`); sets `crossed` where the last
        step crossed `start`."""
        a = np.array(nodes, np.int64)
        c = np.empty(len(a), np.int64)
        c[0] = c0
        c[1:] = self.g.time[a[1:]]
        np.minimum.accumulate(c, out=c)
        lo = np.maximum(c[1:], start)
        d = c[:-1] - lo
        cause = self.cause[a[:-1]]
        cause[jumps] = KERNEL_GAP
        np.add.at(out, cause, d)
        if c[-1] <= start:
            self.crossed = nodes[-2]
        if segs is not None:
            k = np.flatnonzero(d > 0)
            segs += zip(lo[k].tolist(), c[k].tolist(), cause[k].tolist())


def step_paths(t: RankTrace, wins, hta: bool = False, track: list | None = None, walker: list | None = None
               ) -> tuple[list[CriticalPath | None], RankCriticalPath | None]:
    """The critical path of each window (metrics/rank/steps.py) and of the rank's windows together (its length
    the mean over them). GPU traces only: a CPU trace's host threads are its whole timeline. `hta`: HTA's graph
    and longest path over each step's host span (hta.py, `--hta-compat`). `track`, when given, gets the path's
    segments for the timeline: (start, end, step, cause, ""), runs of one cause merged (our path only).
    `walker`, when given, gets the Walker (our path only), for the job path's hops (hops.py).

    Windows that abut (steps.py: a window ends where the next begins) are walked latest first as one chain: where
    the next window's walk crossed into this one on a host thread, this one goes on from there, not from what the
    device was doing at its end. A step's device work that ended long before anything of the next step waited on
    it is slack (kineto resnet50 num_workers=0: done 31-35 ms before the next step's first launch, the host in the
    DataLoader meanwhile); walked from the device's end, each step read 64 % gpu_compute_bound on a host that never
    waited on its device. Where the crossing is a device edge, the window's own sink: a launch edge there is often an
    event wait the trace does not record (torchrec optimizer_5 rank 2: an all-reduce begun 36 ms after its launch,
    behind the compute stream), which would put the whole gap on the launch. The last window has no next one and
    starts from the device's end."""
    if not t.is_gpu or not wins:
        return [None] * len(wins), None
    if hta:
        h = HtaRank(t)
        per = [h.window(win.host_start, win.host_end)[0] for win in wins]
        keep = whole_iterations(wins)
        rank = split_hta(np.sum([p for p, k in zip(per, keep) if k], axis=0), sum(keep))
        steps = [split_hta(p) for p in per]
        return steps, _left_out(rank, len(wins) - sum(keep), _typical(wins, steps, keep))
    w = Walker(build(t))
    if walker is not None:
        walker.append(w)
    ns: list = [None] * len(wins)
    pieces: list = [[] for _ in wins]
    top, after = -1, None  # where the walk of the window after crossed into this one, and that window's start
    for k in range(len(wins) - 1, -1, -1):  # latest first: one chain through windows that abut
        win = wins[k]
        segs: list | None = [] if track is not None else None
        ns[k] = w.walk(win.start, win.end, segs, top if after == win.end else -1)
        top, after = (w.crossed if w.crossed >= 0 and not w.g.device[w.crossed // 2] else -1), win.start
        if segs:
            pieces[k] = merged(segs[::-1], win.step)
    if track is not None:
        track += [x for p in pieces for x in p]
    keep = whole_iterations(wins)
    rank = split(np.sum([p for p, k in zip(ns, keep) if k], axis=0), sum(keep))
    steps = [split(p) for p in ns]
    return steps, _left_out(rank, len(wins) - sum(keep), _typical(wins, steps, keep))


def stated(per_step: list, rank: RankCriticalPath | None, chores: RankChores | None, track: list | None = None
           ) -> tuple[list[CriticalPath | None], RankCriticalPath | None, str]:
    """(per-step paths, the rank's path, why they are not stated): none on an event-sampled rank
    (RankChores.sampled_share, recorded only below idle_stretch.py's SAMPLED_SHARE). Such a capture keeps a
    sample of the host ops, launches and kernels and no synchronize (hta/sampled_pair: ~1 runtime call in 200),
    so the walk runs through holes: it read 86-100 % cpu_bound and 0 % communication there, a bound the events
    cannot support. The walk itself still runs (its graph feeds the job path's hops and the what-ifs); only its
    numbers are withheld, and the timeline's path track with them (`track`, emptied)."""
    share = chores.sampled_share if chores is not None else None
    if share is None or rank is None and not any(p is not None for p in per_step):
        return per_step, rank, ""
    if track is not None:
        track.clear()
    return [None] * len(per_step), None, sampled_note(share)


def whole_iterations(wins) -> list[bool]:
    """Per window, whether it weighs in the rank's per-step mean: in a GPU trace a step that launched no device
    work (steps.py keeps its host span as its window) is no training iteration (a ProfilerStep the capture
    stopped in: hta amd_mi250_minitoy's ProfilerStep#2, 0.05 ms with no op, beside an 8.9 ms step) and is left
    out, unless no step launched any. Its own path is still reported with the step."""
    gpu = [not (w.start == w.host_start and w.end == w.host_end) for w in wins]
    return gpu if any(gpu) else [True] * len(wins)


def _left_out(rank, n: int, typical: TypicalStep | None = None) -> RankCriticalPath | None:
    if not isinstance(rank, RankCriticalPath):
        return None
    rank.steps_left_out = n
    rank.typical = typical
    return rank


def _typical(wins, steps: list, keep: list[bool]) -> TypicalStep | None:
    """The median-length step among those in the mean, where the steps differ (model/critical_path.typical_step)."""
    return typical_step([(w.step, p) for w, p, k in zip(wins, steps, keep) if k and p is not None])


def merged(segs: list[tuple[int, int, int]], step: int) -> list[tuple[int, int, int, str, str]]:
    """Segments in time order with adjacent ones of one cause joined, named by cause."""
    out: list[list] = []
    for a, b, c in segs:
        if out and out[-1][3] == c and out[-1][1] == a:
            out[-1][1] = b
        else:
            out.append([a, b, step, c])
    return [(a, b, s, CAUSES[c], "") for a, b, s, c in out]
