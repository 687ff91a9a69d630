"""The rank's part of the job's critical path (metrics/job/critical_path.py), exported from the worker.

A collective ends only when its last member arrives, so the job's path leaves a rank at each collective it
reaches and continues on the member that arrived last, from that member's arrival back along its own work. The
coordinator can follow that path without any rank's graph if each rank says, for every collective row and for
every window's end, where its own path goes back from there: walking the binding edges (path.Walker) back from
the collective's arrival (its kernel's begin) or from the window's end, until the path reaches the end of
another collective of the rank (`prev`, its row) or the window's start (-1), with the time it crossed split in
HTA's five categories. That is five float32 and one int32 per row: linear in collectives, whatever the graph.

Walks of one window share their tails (two all-reduces waiting on one backward walk back through it), so every
node is walked at most once per window: walks.Walks, which cuts.py also drives for its second walk.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field  # its __init__ compiled once per user (model/code_cache.py)

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.path import Walker
from llmdiag.diagnose.metrics.rank.critical_path.walks import NCAT, Walks, row_stops


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
    n = len(row_ev)
    pos, found, stop = row_stops(w.g, row_ev)
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
    walk = Walks(w, stop)
    for k, win in enumerate(wins):
        walk.window(win.start)
        for i in by_win.get(k, []):  # earliest first: later walks reuse their tails
            sink = 2 * int(pos[i]) if found[i] else w.sink(int(row_start[i]))
            prev[i] = walk.run(sink, int(row_start[i]), cats[i])
        prev[n + k] = walk.run(w.sink(win.end), win.end, cats[n + k])
    ex = (np.stack([t.ts[extra], t.ts[extra] + t.dur[extra]], axis=1).astype(np.int64) if extra is not None
          and len(extra) else np.zeros((0, 2), np.int64))
    return PathHops(cats, prev, row_win, np.array([x.step for x in wins], np.int64), starts, ends, ex)
