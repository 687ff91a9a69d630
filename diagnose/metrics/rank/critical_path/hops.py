"""The rank's part of the job's critical path (metrics/job/critical_path.py), exported from the worker.

A collective ends only when its last member arrives, so the job's path leaves a rank at each collective it
reaches and continues on the member that arrived last, from that member's arrival back along its own work. The
coordinator can follow that path without any rank's graph if each rank says, for every collective row and for
every window's end, where its own path goes back from there: walking the binding edges (path.Walker) back from
the collective's arrival (its kernel's begin) or from the window's end, until the path reaches the end of
another collective of the rank (`prev`, its row) or the window's start (-1), with the time it crossed split in
HTA's five categories. That is five float32 and one int32 per row: linear in collectives, whatever the graph.

Walks of one window share their tails (two all-reduces waiting on one backward walk back through it): each
visited node remembers the walk that crossed it and where in that walk, so a later walk that reaches it adds
that walk's rest without walking it again, and every node is walked at most once per window. The walks visit
most of a window's nodes (84k of 120k on trace_diff/control), so the loop keeps one list store per node and
one append; the steps are summed by category in numpy once the walk ends.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field  # its __init__ compiled once per user (model/code_cache.py)

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES
from llmdiag.diagnose.metrics.rank.critical_path.path import HOST_GAP, Walker
from llmdiag.diagnose.metrics.rank.critical_path.split import CATEGORY_OF
from llmdiag.diagnose.model.critical_path import CATEGORIES

CAT_OF = [CATEGORIES.index(CATEGORY_OF[c]) for c in CAUSES]  # HTA category of each fine cause
GAP = CAT_OF[HOST_GAP]
CAT = np.array(CAT_OF, np.int8)
NCAT = len(CATEGORIES)


@dataclass
class PathHops:
    """Per collective row of RankOutput.collectives (then per window, after the rows): ns per HTA category of
    the rank's path back from the row's arrival (from the window's end) to `prev`. Times on the rank's clock."""

    cats: np.ndarray = field(default_factory=lambda: np.zeros((0, NCAT), np.float32))  # rows + windows
    prev: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # row reached, -1: window start
    win: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # per row: its window, -1 none
    step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per window: its step number
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per window, ns
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    extra: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # (start, end) ns of the rows
    # after the collective rows: the rank's send/recv kernels (p2p_rows), found by their times in its p2p records

    @property
    def rows(self) -> int:
        return len(self.prev) - len(self.step)


def p2p_rows(t, records) -> np.ndarray:
    """The device events of the rank's send/recv records ((pg, kind, peer, start, end), rank/pipeline/p2p.py),
    one per kernel (a batched kernel carries several records), in time order: the rows the job path may cross
    at a send/recv as at a collective."""
    from llmdiag.diagnose.io.trace import COMM

    if not records:
        return np.zeros(0, np.int64)
    want = {(int(r[3]), int(r[4])) for r in records}
    comm = np.flatnonzero((t.kind == COMM) & (t.stream >= 0))
    found = {}
    for i, a, b in zip(comm.tolist(), t.ts[comm].tolist(), (t.ts[comm] + t.dur[comm]).tolist()):
        if (a, b) in want and (a, b) not in found:
            found[(a, b)] = i
    return np.array(sorted(found.values()), np.int64)


def path_hops(w: Walker, row_ev: np.ndarray, row_start: np.ndarray, wins, extra: np.ndarray | None = None,
              t=None) -> PathHops:
    """The hops of a rank whose collective rows are the events `row_ev` (beginning at `row_start`), in the
    windows `wins` (metrics/rank/steps.py); `extra` (events of trace `t`): send/recv kernels, rows after them."""
    if extra is not None and len(extra):
        row_ev = np.concatenate([row_ev, extra])
        row_start = np.concatenate([row_start, t.ts[extra]])
    g = w.g
    n = len(row_ev)
    pos = np.searchsorted(g.ev, row_ev).clip(0, max(len(g.ev) - 1, 0))
    found = (g.ev[pos] == row_ev) & g.device[pos] if len(g.ev) else np.zeros(n, bool)
    stop = dict(zip((2 * pos[found] + 1).tolist(), np.flatnonzero(found).tolist()))  # end node -> row
    starts = np.array([x.start for x in wins], np.int64)
    ends = np.array([x.end for x in wins], np.int64)
    win_of = np.searchsorted(starts, row_start, side="right") - 1
    cats = np.zeros((n + len(wins), NCAT), np.float32)
    prev = np.full(n + len(wins), -1, np.int32)
    by_win: dict[int, list[int]] = {}
    row_win = np.full(n, -1, np.int32)
    for i, k in enumerate(win_of.tolist()):
        if k >= 0 and row_start[i] <= ends[k]:
            by_win.setdefault(k, []).append(i)
            row_win[i] = k
    walk = _Walks(w, stop)
    for k, win in enumerate(wins):
        walk.window(win.start)
        for i in by_win.get(k, []):  # earliest first: later walks reuse their tails
            sink = 2 * int(pos[i]) if found[i] else w.sink(int(row_start[i]))
            prev[i] = walk.run(sink, int(row_start[i]), cats[i])
        prev[n + k] = walk.run(w.sink(win.end), win.end, cats[n + k])
    ex = (np.stack([t.ts[extra], t.ts[extra] + t.dur[extra]], axis=1).astype(np.int64) if extra is not None
          and len(extra) else np.zeros((0, 2), np.int64))
    return PathHops(cats, prev, row_win, np.array([x.step for x in wins], np.int64), starts, ends, ex)


STOP = 1 << 62  # a node's mark at or above: the end node of row (mark - STOP); below: (walk << 32) + its step


class _Walks:
    """The walks of each window back to its start, each stopping at a collective's end node."""

    def __init__(self, w: Walker, stop: dict[int, int]):
        self.w = w
        self.mark = [-1] * len(w._time)  # node -> STOP + its row, or the walk that crossed it and at which step
        for node, row in stop.items():
            self.mark[node] = STOP + row
        self.steps: list[tuple[np.ndarray, np.ndarray]] = []  # per walk: (category, ns) of its steps
        self.tail: list[list[int]] = []  # per walk: what its end added (the gap left, or an earlier walk's rest)
        self.ends: list[int] = []  # per walk: the row it reached (-1 the start)
        self.start = self.base = 0

    def window(self, start: int) -> None:
        """The next walks are the next window's: no tail of an earlier window's walk is shared."""
        self.start, self.base = start, len(self.ends)

    def _rest(self, walk: int, k: int) -> list[int]:
        """ns per category that `walk` summed from its step `k` on, its tail included."""
        cat, ns = self.steps[walk]
        cat, ns = cat[k:], ns[k:]
        return [int(ns[cat == j].sum()) + t for j, t in enumerate(self.tail[walk])]

    def run(self, v: int, end: int, out: np.ndarray) -> int:
        """Walk back from node `v` (at or before `end`); adds ns per category into `out`; the row reached."""
        start, wid = self.start, len(self.ends)
        tail, reached, gap, chain = [0] * NCAT, -1, 0, []
        if end > start and v >= 0:
            time, pred, mark = self.w._time, self.w._pred, self.mark
            c = time[v]
            if c > end:
                c = end
            gap = end - c
            lo = self.base << 32  # marks of this window's walks (and the stops) are at or above
            m = wid << 32
            while c > start:  # a node is crossed once per walk (`mark`): a loop of edges ends the walk
                if (h := mark[v]) >= lo:
                    if h >= STOP:
                        reached = h - STOP
                    elif h >> 32 == wid:  # a loop (hostile times): no further
                        tail[GAP] = c - start
                    else:  # an earlier walk of this window crossed here: its rest is ours
                        tail, reached = self._rest(h >> 32, h & 0xFFFFFFFF), self.ends[h >> 32]
                    break
                mark[v] = m
                m += 1
                u = pred[v]
                if u < 0:
                    tail[GAP] = c - start
                    break
                chain.append(v)
                tu = time[u]
                if tu < c:
                    c = tu
                v = u
        elif end > start:
            gap = end - start
        acc = tail[:]
        if chain:  # step i goes from chain[i] to the next node, over the time the walk carried (a running min)
            chain.append(v)
            nodes = np.array(chain, np.int64)
            c_at = self.w.g.time[nodes]
            c_at[0] = min(c_at[0], end)
            np.minimum.accumulate(c_at, out=c_at)
            steps = (CAT[self.w.cause[nodes[:-1]]], c_at[:-1] - np.maximum(c_at[1:], start))
            acc = [int(steps[1][steps[0] == j].sum()) + t for j, t in enumerate(tail)]
        else:
            steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.steps.append(steps)
        self.tail.append(tail)
        self.ends.append(reached)
        acc[GAP] += gap
        out += np.asarray(acc, np.float32)
        return reached
