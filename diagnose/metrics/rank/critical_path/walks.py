"""Walks back along a rank's binding edges that share their tails: the engine of the job path's hops and cuts.

hops.py walks, in each window, back from every collective row's arrival and from the window's end, until the walk
reaches a stop (the end node of a collective row: the job's path may leave the rank there) or the window's start;
cuts.py walks some windows again with more stops. Both need the same thing: many walks over one window, which
mostly run into each other (two all-reduces waiting on one backward walk back through it), summed per HTA
category. `Walks` does that with each node walked at most once per window: a visited node remembers the walk that
crossed it and at which step, so a later walk that reaches it adds that walk's rest without walking it again.

The walks visit most of a window's nodes (84k of 120k on trace_diff/control), so the loop keeps one list store per
node and one append; the steps are summed by category in numpy once the walk ends. The binding edges are
path.Walker's (Graph.binding(walk=True)), so a walk here crosses what Walker.walk crosses, with two differences
that make it a part of the path rather than the whole: it stops at a stop node, and a node without a recorded
dependency ends it (the rest of the window a host gap) instead of going on from what the device was doing.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES, Graph
from llmdiag.diagnose.metrics.rank.critical_path.path import HOST_GAP, Walker
from llmdiag.diagnose.metrics.rank.critical_path.split import CATEGORY_OF
from llmdiag.diagnose.model.critical_path import CATEGORIES

CAT_OF = [CATEGORIES.index(CATEGORY_OF[c]) for c in CAUSES]  # HTA category of each fine cause
GAP = CAT_OF[HOST_GAP]
CAT = np.array(CAT_OF, np.int8)
NCAT = len(CATEGORIES)
STOP = 1 << 62  # a node's mark at or above: the end node of row (mark - STOP); below: (walk << 32) + its step


def row_stops(g: Graph, row_ev: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
    """Where the rows (device events `row_ev`, e.g. a rank's collective kernels) are in graph `g`: per row its
    selected-event position and whether it is a device event of the graph, and the stops (end node -> row) of
    those that are. A row's walk starts at its begin node, 2 * position."""
    pos = np.searchsorted(g.ev, row_ev).clip(0, max(len(g.ev) - 1, 0))
    found = (g.ev[pos] == row_ev) & g.device[pos] if len(g.ev) else np.zeros(len(row_ev), bool)
    return pos, found, dict(zip((2 * pos[found] + 1).tolist(), np.flatnonzero(found).tolist()))


class Walks:
    """The walks of each window back to its start, each ending at a stop (node -> row: `stop`), at the window's
    start, at a node with no binding edge, or in an earlier walk of the window (whose rest it takes). Call
    `window` before a window's walks, then `run` once per walk, earliest first (a later walk reuses the tails of
    earlier ones, never the other way). Marks are kept across windows, so the windows must not overlap."""

    def __init__(self, w: Walker, stop: dict[int, int]):
        self.w = w
        self.mark = [-1] * len(w.times)  # node -> STOP + its row, or the walk that crossed it and at which step
        for node, row in stop.items():
            self.mark[node] = STOP + row
        self.steps: list[tuple[np.ndarray, np.ndarray]] = []  # per walk: (category, ns) of its steps
        self.tail: list[list[int]] = []  # per walk: what its end added (the gap left, or an earlier walk's rest)
        self.ends: list[int] = []  # per walk: the row it reached (-1 the start)
        self.start = self.base = 0

    def window(self, start: int) -> None:
        """The next walks are the next window's, which begins at `start`: no tail of an earlier window's walk is
        shared."""
        self.start, self.base = start, len(self.ends)

    def _rest(self, walk: int, k: int) -> list[int]:
        """ns per category that `walk` summed from its step `k` on, its tail included."""
        cat, ns = self.steps[walk]
        return [s + t for s, t in zip(_by_cat(cat[k:], ns[k:]), self.tail[walk])]

    def run(self, v: int, end: int, out: np.ndarray) -> int:
        """Walk back from node `v` (at or before `end`, -1 none) to the window's start; adds ns per HTA category
        (CATEGORIES order) into `out`; returns the row of the stop reached, -1 none."""
        start, wid = self.start, len(self.ends)
        tail, reached, gap, chain = [0] * NCAT, -1, 0, []
        c, loose = end, False  # loose: ended with time left before the start (a loop, a node with no binding edge)
        if end > start and v >= 0:
            time, pred, mark = self.w.times, self.w.preds, self.mark
            c = time[v]
            if c > end:
                c = end
            gap = end - c
            lo = self.base << 32  # marks of this window's walks (and the stops) are at or above
            m = wid << 32
            # The loop only follows edges. The time the walk carries (the running min of the nodes' times) is read
            # back in numpy below; above the start before a step, it is at or below it after one iff that node's is.
            while c > start:  # a node is crossed once per walk (`mark`): a loop of edges ends the walk
                if (h := mark[v]) >= lo:
                    if h >= STOP:
                        reached = h - STOP
                    elif h >> 32 == wid:  # a loop (hostile times): no further
                        loose = True
                    else:  # an earlier walk of this window crossed here: its rest is ours
                        tail, reached = self._rest(h >> 32, h & 0xFFFFFFFF), self.ends[h >> 32]
                    break
                mark[v] = m
                m += 1
                u = pred[v]
                if u < 0:
                    loose = True
                    break
                chain.append(v)
                v = u
                if time[u] <= start:
                    break
        elif end > start:
            gap = end - start
        if chain:  # step i goes from chain[i] to the next node, over the time the walk carried (a running min)
            chain.append(v)
            nodes = np.array(chain, np.int64)
            c_at = self.w.g.time[nodes]
            c_at[0] = min(c_at[0], end)
            np.minimum.accumulate(c_at, out=c_at)
            steps = (CAT[self.w.cause[nodes[:-1]]], c_at[:-1] - np.maximum(c_at[1:], start))
            c = int(c_at[-1])
        else:
            steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        if loose:
            tail[GAP] = c - start
        acc = [s + t for s, t in zip(_by_cat(*steps), tail)] if chain else tail[:]
        self.steps.append(steps)
        self.tail.append(tail)
        self.ends.append(reached)
        acc[GAP] += gap
        out += np.asarray(acc, np.float32)
        return reached


def _by_cat(cat: np.ndarray, ns: np.ndarray) -> list[int]:
    """ns (each >= 0) summed per category: one bincount, whose float64 sums are exact below 2**53 ns (104 days),
    else the int64 sums one category at a time."""
    if not len(ns):
        return [0] * NCAT
    if int(ns.max()) * len(ns) < 2**53:
        return np.bincount(cat, weights=ns, minlength=NCAT).astype(np.int64).tolist()
    return [int(ns[cat == j].sum()) for j in range(NCAT)]
