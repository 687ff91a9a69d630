"""The rank's job-path hops (metrics/rank/critical_path/hops.py, its walks walks.py) on hand-made dependency graphs.

One graph's answer is worked out by hand in its docstring; random graphs (times running forward along some
edges, loops of edges: what a hostile trace's clocks make) are checked against `_reference`, the walk as the
module documents it written the plain way (one dict of per-node sums per window, nothing vectorised), which
the module's faster walk must match to the bit.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES, Graph
from llmdiag.diagnose.metrics.rank.critical_path.hops import path_hops
from llmdiag.diagnose.metrics.rank.critical_path.walks import CAT_OF, GAP, NCAT
from llmdiag.diagnose.metrics.rank.critical_path.path import Walker
from llmdiag.diagnose.model.critical_path import CATEGORIES

Win = namedtuple("Win", "step start end")
CAT = {c: i for i, c in enumerate(CATEGORIES)}


def _graph(time, device, edges) -> Graph:
    """Events k = 0.. with begin/end nodes 2k/2k+1 at `time`; edges (src, dst, cause name)."""
    src = np.array([e[0] for e in edges], np.int64)
    dst = np.array([e[1] for e in edges], np.int64)
    return Graph(np.arange(len(device), dtype=np.int64), np.array(time, np.int64), np.array(device, bool), src, dst,
                 np.zeros(len(edges), np.int8), np.array([CAUSES.index(e[2]) for e in edges], np.int8))


def test_hand_graph():
    """Events: 0 a host op 0-100 µs... in ns: host op 0-100, 1 a collective kernel 100-300 (launched from the
    op's end: launch_delay 1->2), 2 a kernel 300-400 behind it on its stream (kernel_gap 3->4). Window [0, 400],
    the collective its one row. The row's walk starts at the collective's begin (100): back over the launch
    edge (0 ns) and the host op 0-100 (cpu_bound 100) to the window's start: prev -1. The window's walk
    starts at its end (node 5, the kernel's end, 400): the kernel 300-400 (compute 100), the stream edge from
    the collective's end (0 ns), where it stops: prev = row 0."""
    g = _graph([0, 100, 100, 300, 300, 400], [False, True, True],
               [(0, 1, "host_op"), (1, 2, "launch_delay"), (2, 3, "communication"), (3, 4, "kernel_gap"),
                (4, 5, "compute")])
    h = path_hops(Walker(g), np.array([1]), np.array([100]), [Win(7, 0, 400)])
    assert h.prev.tolist() == [-1, 0] and h.win.tolist() == [0] and h.step.tolist() == [7] and h.rows == 1
    want = np.zeros((2, NCAT), np.float32)
    want[0, CAT["cpu_bound"]] = 100
    want[1, CAT["gpu_compute_bound"]] = 100
    assert h.cats.tolist() == want.tolist()


def _reference(w: Walker, g: Graph, row_ev, row_start, wins):
    """(cats, prev) of path_hops, the documented way: per window, walks earliest first, each node remembering
    the walk that crossed it and that walk's sums there; a later walk reaching it adds the rest."""
    pos = np.searchsorted(g.ev, row_ev).clip(0, max(len(g.ev) - 1, 0))
    found = (g.ev[pos] == row_ev) & g.device[pos]
    stop = {2 * int(pos[i]) + 1: i for i in range(len(row_ev)) if found[i]}
    n = len(row_ev)
    cats = np.zeros((n + len(wins), NCAT), np.float32)
    prev = np.full(n + len(wins), -1, np.int32)
    starts = np.array([x.start for x in wins], np.int64)
    win_of = np.searchsorted(starts, row_start, side="right") - 1
    time, pred = g.time.tolist(), w.preds
    for k, win in enumerate(wins):
        seen: dict = {}
        totals: list = []
        todo = [(i, 2 * int(pos[i]) if found[i] else w.sink(int(row_start[i])), int(row_start[i]))
                for i in range(n) if win_of[i] == k and row_start[i] <= win.end]
        for i, v, end in todo + [(n + k, w.sink(win.end), win.end)]:
            acc, reached, wid = [0] * NCAT, -1, len(totals)
            if end > win.start and v >= 0:
                c = min(time[v], end)
                acc[GAP] += end - c
                while c > win.start:
                    if v in stop:
                        reached = stop[v]
                        break
                    if v in seen:
                        j, snap = seen[v]
                        if j == wid:
                            acc[GAP] += c - win.start
                        else:
                            acc = [a + t - s for a, t, s in zip(acc, totals[j][0], snap)]
                            reached = totals[j][1]
                        break
                    seen[v] = (wid, list(acc))
                    u = pred[v]
                    if u < 0:
                        acc[GAP] += c - win.start
                        break
                    tu = min(time[u], c)
                    acc[CAT_OF[int(w.cause[v])]] += c - max(tu, win.start)
                    c, v = tu, u
            elif end > win.start:
                acc[GAP] += end - win.start
            totals.append((acc, reached))
            cats[i] = np.asarray(acc, np.float32)
            prev[i] = reached
    return cats, prev


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_match_the_plain_walk(seed):
    """Random events and edges, some running back in time, some loops; collectives among the device events
    (some rows not in the graph), windows cutting through the events."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(3, 120))
    begin = np.sort(rng.integers(0, 10_000, m))
    dur = rng.integers(0, 500, m)
    time = np.empty(2 * m, np.int64)
    time[0::2], time[1::2] = begin, begin + dur
    device = rng.random(m) < 0.5
    edges = [(2 * k, 2 * k + 1, CAUSES[int(rng.integers(len(CAUSES)))]) for k in range(m)]
    for _ in range(int(rng.integers(m, 4 * m))):
        a, b = rng.integers(0, 2 * m, 2)
        if a != b and (time[a] <= time[b] or rng.random() < 0.15):  # a few run forward in time
            edges.append((int(a), int(b), CAUSES[int(rng.integers(len(CAUSES)))]))
    cuts = np.sort(rng.integers(-100, 11_000, int(rng.integers(2, 6))))
    if seed % 2:  # a loop of edges among the last nodes before the last cut, where its window's walk begins
        last = np.flatnonzero(time <= cuts[-1])
        a, b, c = (last[np.argsort(time[last], kind="stable")[-3:]].tolist() + [0, 1, 2])[:3]
        edges += [(a, b, "host_op"), (b, c, "compute"), (c, a, "kernel_gap")]
    g = _graph(time, device, edges)
    w = Walker(g)
    wins = [Win(j, int(a), int(b)) for j, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
    dev = np.flatnonzero(device)
    rows = np.sort(rng.choice(np.r_[dev, m + np.arange(3)], size=min(len(dev) + 3, int(rng.integers(0, 20))),
                              replace=False)).astype(np.int64)
    row_start = np.array([time[2 * r] if r < m else int(rng.integers(0, 10_000)) for r in rows], np.int64)
    h = path_hops(w, rows, row_start, wins)
    cats, prev = _reference(w, g, rows, row_start, wins)
    assert h.prev.tolist() == prev.tolist()
    assert h.cats.tolist() == cats.tolist()
