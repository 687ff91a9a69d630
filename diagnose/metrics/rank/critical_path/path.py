"""The critical path of each step: from the step's last node back along the edge each node waited on last.

Every edge weighs the time between its two points, so the longest path through a step is as long as the step
itself, and the question is only which dependency each point waited on: the in-edge whose source arrived last
(the others had slack; Graph.binding). Walking those back from the step's last point tiles the step's time with
segments, each with the cause of its edge. A point with no recorded dependency (the first op of a thread, a
kernel launched before the capture) ends the walk: the rest of the step is counted as an unprofiled host gap.
The walk visits only the path's own nodes; the graph and the binding edges are numpy passes over the events.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES, Graph, build
from llmdiag.diagnose.metrics.rank.critical_path.hta import HtaRank
from llmdiag.diagnose.metrics.rank.critical_path.split import split, split_hta
from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.model.critical_path import CriticalPath, RankCriticalPath

HOST_GAP = CAUSES.index("host_gap")


class Walker:
    """The binding edge of every node of a graph, as Python lists: the walk reads one node at a time, and a list
    indexes ~10x faster than a numpy scalar."""

    def __init__(self, g: Graph):
        self.g = g
        pred_edge, pred = g.binding()
        self.dev_end = np.zeros(g.nodes, bool)
        self.dev_end[1::2] = g.device
        self.cause = np.where(pred_edge >= 0, g.cause[np.maximum(pred_edge, 0)], -1)  # numpy too: hops.py
        self._time, self._pred, self._cause = g.time.tolist(), pred.tolist(), self.cause.tolist()
        self._order: np.ndarray | None = None
        self._sorted = g.time

    def sink(self, end: int) -> int:
        """The last node at or before `end` (a device op's end first among equal times); -1 none."""
        if self._order is None:  # sorted once, on the first window
            self._order = np.argsort(self.g.time, kind="stable")
            self._sorted = self.g.time[self._order]
        k = int(np.searchsorted(self._sorted, end, side="right")) - 1
        if k < 0:
            return -1
        lo = int(np.searchsorted(self._sorted, self._sorted[k], side="left"))
        tied = self._order[lo:k + 1]
        dev = tied[self.dev_end[tied]]
        return int(dev[0] if len(dev) else tied[-1])

    def walk(self, start: int, end: int, segs: list | None = None) -> np.ndarray:
        """Nanoseconds per cause (CAUSES order) of the path tiling [start, end] back from its last node; the
        segments (t0, t1, cause), latest first, appended to `segs` when given."""
        acc = [0] * len(CAUSES)
        v = self.sink(end)
        if end <= start:
            return np.array(acc, np.int64)
        if v < 0:
            acc[HOST_GAP] = end - start
            return np.array(acc, np.int64)
        time, pred, cause = self._time, self._pred, self._cause
        c = min(time[v], end)
        acc[HOST_GAP] += end - c
        budget = len(time)  # a hostile trace's times can close a loop of binding edges: never walk one forever
        while c > start:
            u = pred[v]
            budget -= 1
            if u < 0 or budget < 0:
                acc[HOST_GAP] += c - start
                if segs is not None:
                    segs.append((start, c, HOST_GAP))
                break
            tu = min(time[u], c)
            lo = tu if tu > start else start
            acc[cause[v]] += c - lo
            if segs is not None and c > lo:
                segs.append((lo, c, cause[v]))
            c, v = tu, u
        return np.array(acc, np.int64)


def step_paths(t: RankTrace, wins, hta: bool = False, track: list | None = None, walker: list | None = None
               ) -> tuple[list[CriticalPath | None], RankCriticalPath | None]:
    """The critical path of each window (metrics/rank/steps.py) and of the rank's windows together (its length
    the mean over them). GPU traces only: a CPU trace's host threads are its whole timeline. `hta`: HTA's graph
    and longest path over each step's host span (hta.py, `--hta-compat`). `track`, when given, gets the path's
    segments for the timeline: (start, end, step, cause, ""), runs of one cause merged (our path only).
    `walker`, when given, gets the Walker (our path only), for the job path's hops (hops.py)."""
    if not t.is_gpu or not wins:
        return [None] * len(wins), None
    if hta:
        h = HtaRank(t)
        per = [h.window(win.host_start, win.host_end)[0] for win in wins]
        rank = split_hta(np.sum(per, axis=0), len(per))
        return [split_hta(p) for p in per], rank if isinstance(rank, RankCriticalPath) else None
    w = Walker(build(t))
    if walker is not None:
        walker.append(w)
    per = []
    for win in wins:
        segs: list | None = [] if track is not None else None
        per.append(w.walk(win.start, win.end, segs))
        if track is not None and segs:
            track += merged(segs[::-1], win.step)
    rank = split(np.sum(per, axis=0), len(per))
    return [split(p) for p in per], rank if isinstance(rank, RankCriticalPath) else None


def merged(segs: list[tuple[int, int, int]], step: int) -> list[tuple[int, int, int, str, str]]:
    """Segments in time order with adjacent ones of one cause joined, named by cause."""
    out: list[list] = []
    for a, b, c in segs:
        if out and out[-1][3] == c and out[-1][1] == a:
            out[-1][1] = b
        else:
            out.append([a, b, step, c])
    return [(a, b, s, CAUSES[c], "") for a, b, s, c in out]
