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
    """The binding edges of a graph and the nodes in time order (device ends last among equal times)."""

    def __init__(self, g: Graph):
        self.g = g
        self.pred_edge, self.pred = g.binding()
        dev_end = np.zeros(g.nodes, np.int8)
        dev_end[1::2] = g.device
        self.order = np.lexsort((dev_end, g.time))
        self.sorted_time = g.time[self.order]
        # the walk reads one node at a time: Python lists index ~10x faster than numpy scalars
        self._time, self._src, self._cause = g.time.tolist(), g.src.tolist(), g.cause.tolist()
        self._pe = self.pred_edge.tolist()

    def segments(self, start: int, end: int) -> tuple[list[tuple[int, int, int]], list[int]]:
        """[(t0, t1, cause)] tiling [start, end] back from its last node, latest first; and the path's edges."""
        k = int(np.searchsorted(self.sorted_time, end, side="right")) - 1
        segs: list[tuple[int, int, int]] = []
        edges: list[int] = []
        if k < 0 or end <= start:
            return ([(start, end, HOST_GAP)] if end > start else []), edges
        v = int(self.order[k])
        time, src, cause, pe = self._time, self._src, self._cause, self._pe
        c = min(time[v], end)
        if c < end:
            segs.append((c, end, HOST_GAP))
        while c > start:
            e = pe[v]
            if e < 0:
                segs.append((start, c, HOST_GAP))
                break
            u = src[e]
            tu = min(time[u], c)
            lo = max(tu, start)
            if c > lo:
                segs.append((lo, c, cause[e]))
            edges.append(e)
            c, v = tu, u
        return segs, edges


def cause_ns(segs: list[tuple[int, int, int]]) -> np.ndarray:
    """Nanoseconds per cause (CAUSES order) of a path's segments."""
    out = np.zeros(len(CAUSES), np.int64)
    if segs:
        a = np.array(segs, np.int64)
        np.add.at(out, a[:, 2], a[:, 1] - a[:, 0])
    return out


def step_paths(t: RankTrace, wins, hta: bool = False) -> tuple[list[CriticalPath | None], RankCriticalPath | None]:
    """The critical path of each window (metrics/rank/steps.py) and of the rank's windows together (its length
    the mean over them). GPU traces only: a CPU trace's host threads are its whole timeline. `hta`: HTA's graph
    and longest path over each step's host span (hta.py, `--hta-compat`)."""
    if not t.is_gpu or not wins:
        return [None] * len(wins), None
    if hta:
        h = HtaRank(t)
        per = [h.window(win.host_start, win.host_end)[0] for win in wins]
        rank = split_hta(np.sum(per, axis=0), len(per))
        return [split_hta(p) for p in per], rank if isinstance(rank, RankCriticalPath) else None
    w = Walker(build(t))
    per = [cause_ns(w.segments(win.start, win.end)[0]) for win in wins]
    rank = split(np.sum(per, axis=0), len(per))
    return [split(p) for p in per], rank if isinstance(rank, RankCriticalPath) else None
