"""The critical path's faster passes against their plain definitions, on random inputs with ties and hostile times.

Each pass was rewritten for speed (a packed sort key, ufunc maxima instead of a lexsort, a walk that only follows
edges in Python, the what-ifs' anchors in time order without Kahn's loop); each test writes the pass the plain way
(the documented order, a Python loop per node) and requires the same answer to the bit.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES, PRIORITY, Graph
from llmdiag.diagnose.metrics.rank.critical_path.host_order import host_points
from llmdiag.diagnose.metrics.rank.critical_path.path import HOST_GAP, KERNEL_GAP, Walker
from tests.unit.metrics.test_simulate import _handoff, _queued_steps, _sim, _sync_then_cpu


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("scale", [1, 2**56])
def test_host_points_in_nesting_order(seed, scale):
    """Per thread by time; at one instant ends before begins, the longer begin first, the later-begun end first,
    then by event (begins) / reversed event (ends). `scale` stretches the times past one packed key."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 200))
    begin = rng.integers(0, 40, m) * scale  # few distinct times: many ties
    end = begin + rng.integers(1, 10, m) * scale
    thread = rng.integers(0, 4, m).astype(np.int32) * 7
    t = SimpleNamespace(thread=thread)
    hk = np.sort(rng.choice(m, int(rng.integers(1, m + 1)), replace=False))
    nodes, th, step = host_points(t, np.arange(m), hk, begin, end)
    pts = [(int(thread[k]), int(begin[k]), 1, -int(end[k] - begin[k]), int(k), 2 * int(k)) for k in hk.tolist()]
    pts += [(int(thread[k]), int(end[k]), 0, -int(begin[k]), -int(k), 2 * int(k) + 1) for k in hk.tolist()]
    pts.sort()
    assert nodes.tolist() == [p[5] for p in pts]
    assert th.tolist() == [p[0] for p in pts]
    assert step.tolist() == [1 if p[2] else -1 for p in pts]


def _random_graph(rng, huge: bool = False) -> Graph:
    m = int(rng.integers(2, 80))
    begin = np.sort(rng.integers(0, 300, m)) * (2**52 if huge else 1)
    time = np.empty(2 * m, np.int64)
    time[0::2], time[1::2] = begin, begin + rng.integers(0, 20, m)
    device = rng.random(m) < 0.5
    src, dst = [2 * k for k in range(m)], [2 * k + 1 for k in range(m)]
    for _ in range(int(rng.integers(m, 4 * m))):
        a, b = rng.integers(0, 2 * m, 2).tolist()
        if a != b and (time[a] <= time[b] or rng.random() < 0.15):  # a few run forward in time: loops
            src.append(a)
            dst.append(b)
    n = len(src)
    return Graph(np.arange(m, dtype=np.int64), time, device, np.array(src, np.int64), np.array(dst, np.int64),
                 rng.integers(0, 6, n).astype(np.int8), rng.integers(0, len(CAUSES), n).astype(np.int8))


@pytest.mark.parametrize("seed", range(30))
def test_binding_is_the_last_arrival(seed):
    """Per node the in-edge whose source arrives last, of equal arrivals the higher priority, then the later edge;
    the same past 2**59 ns (the lexsort's branch)."""
    rng = np.random.default_rng(seed)
    g = _random_graph(rng, huge=seed % 3 == 0)
    best: dict[int, tuple] = {}
    for e, (s, d, ty) in enumerate(zip(g.src.tolist(), g.dst.tolist(), g.etype.tolist())):
        key = (int(g.time[s]), int(PRIORITY[ty]), e)
        best[d] = max(best.get(d, key), key)
    want = [best[v][2] if v in best else -1 for v in range(g.nodes)]
    pred_edge, pred = g.binding()
    assert pred_edge.tolist() == want
    assert pred.tolist() == [int(g.src[e]) if e >= 0 else -1 for e in want]
    assert g.pred_list() == pred.tolist() and g.pred_list(walk=True) == g.binding(walk=True)[1].tolist()


def _plain_walk(w: Walker, start: int, end: int, segs: list, top: int = -1) -> tuple[list[int], int]:
    """Walker.walk written one node at a time, as documented: (ns per cause, crossed)."""
    acc, crossed = [0] * len(CAUSES), -1
    v = top if top >= 0 else w.sink(end)
    if end <= start:
        return acc, crossed
    if v < 0:
        acc[HOST_GAP] = end - start
        return acc, crossed
    time, pred, cause = w.times, w.preds, w.cause.tolist()
    c = max(min(time[v], end), start)
    acc[HOST_GAP] += end - c
    budget = len(time)
    while c > start:
        u = pred[v]
        budget -= 1
        if u < 0 and budget >= 0 and (u := w.device_at(c)) >= 0:
            tu = max(min(time[u], c), start)
            acc[KERNEL_GAP] += c - tu
            if c > tu:
                segs.append((tu, c, KERNEL_GAP))
            if tu <= start:
                crossed = v
            c, v = tu, u
            continue
        if u < 0 or budget < 0:
            acc[HOST_GAP] += c - start
            segs.append((start, c, HOST_GAP))
            break
        tu = min(time[u], c)
        lo = max(tu, start)
        acc[cause[v]] += c - lo
        if c > lo:
            segs.append((lo, c, cause[v]))
        if tu <= start:
            crossed = v
        c, v = tu, u
    return acc, crossed


@pytest.mark.parametrize("seed", range(40))
def test_walk_matches_the_plain_walk(seed):
    """Random graphs (loops, points with no dependency where the walk goes on from the device), windows cutting
    through them, walked from their sink and from a given top node."""
    rng = np.random.default_rng(seed)
    g = _random_graph(rng)
    w = Walker(g)
    cuts = np.sort(rng.integers(-10, 330, 4)).tolist()
    for a, b in zip(cuts[:-1], cuts[1:]):
        for top in (-1, int(rng.integers(0, g.nodes))):
            segs: list = []
            got = w.walk(a, b, segs, top)
            want_segs: list = []
            want, crossed = _plain_walk(w, a, b, want_segs, top)
            assert got.tolist() == want and w.crossed == crossed and segs == want_segs


@pytest.mark.parametrize("make", [_sync_then_cpu, _queued_steps, _handoff])
def test_time_order_retimes_as_kahn(tmp_path, make):
    """Where the anchors' time order is topological it is taken for Kahn's: both re-time every edit alike."""
    _, _, s = _sim(tmp_path, make())
    u, v, by_time = s._anchor_edges()
    kahn = s._kahn(u, v, by_time)
    assert s.cuts == 0 and sorted(kahn) == sorted(s.proc) == list(range(len(s.anchors)))
    for w in (s.w, s.without_syncs(), s.scaled(np.flatnonzero(s.g.device), 0.25)):
        fast = s.retime(w)
        s.proc, keep = kahn, s.proc
        assert np.array_equal(s.retime(w), fast)
        s.proc = keep
