"""The exposed part of a rank's wait for later peers (metrics/job/exposed_wait.py, skew.wait_exposed_ms_by_rank):
generated two-rank traces whose answer is placed by hand, and the vectorised sweep against a per-row reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.job.exposed_wait import exposed_waits
from tests.gen.builder import TraceBuilder

STEP_US = 10_000
STEPS = 3


def _pair(tmp_path, under: bool):
    """Per step (k0 = (k-1)·10 ms): rank 1 computes [k0+100, k0+2100] µs then all-reduces [k0+2100, k0+2400]; rank 0
    starts the same all-reduce at k0+100, so it waits 2 ms for rank 1 (its kernel ends with rank 1's). Rank 0's
    1.5 ms GEMM runs under the wait ([k0+100, k0+1600]: 0.5 ms of the wait exposed) or, in the twin, after the
    all-reduce ([k0+2400, k0+3900]: the whole 2 ms exposed)."""
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        for k in range(1, STEPS + 1):
            k0 = (k - 1) * STEP_US
            b.step(k, k0, k0 + STEP_US)
            if rank == 1:
                b.kernel("void gemm_kernel<float>()", k0 + 100, 2000, stream=7, launch_at=k0 + 10)
                b.nccl("allreduce", k0 + 2100, 300, stream=20, launch_at=k0 + 11, nelems=1 << 20, group_size=2,
                       pg_ranks=[0, 1])
            else:
                b.kernel("void gemm_kernel<float>()", k0 + (100 if under else 2400), 1500, stream=7, launch_at=k0 + 10)
                b.nccl("allreduce", k0 + 100, 2300, stream=20, launch_at=k0 + 11, nelems=1 << 20, group_size=2,
                       pg_ranks=[0, 1])
        b.write(tmp_path / f"rank{rank}.pt.trace.json")
    a = analyze_path(str(tmp_path))
    (n,) = {len(r.steps) for r in a.ranks}
    return a, n


def test_a_wait_under_compute_is_not_exposed(tmp_path):
    a, n = _pair(tmp_path, under=True)
    assert a.skew.wait_ms_by_rank == {"0": 2.0 * n}
    assert a.skew.wait_exposed_ms_by_rank == {"0": 0.5 * n}  # [k0+1600, k0+2100]: the GEMM has ended
    assert a.ranks[0].exposed_comm_ms == pytest.approx(0.8)  # [k0+1600, k0+2400]: the exposed wait is part of it


def test_a_wait_with_no_compute_under_it_is_exposed_whole(tmp_path):
    a, n = _pair(tmp_path, under=False)
    assert a.skew.wait_ms_by_rank == {"0": 2.0 * n}
    assert a.skew.wait_exposed_ms_by_rank == {"0": 2.0 * n}
    assert a.ranks[0].exposed_comm_ms == pytest.approx(2.3)


def test_concurrent_waits_count_once_and_unrecorded_unions_count_whole():
    free = {0: (np.array([0, 50]), np.array([30, 100])), 1: None}
    rank = np.array([0, 0, 0, 1, 1])
    a = np.array([10, 20, 60, 5, 40])
    b = np.array([60, 70, 60, 25, 50])  # rank 0's third row: no wait
    per_row, per_rank = exposed_waits(free, rank, a, b)
    assert per_row.tolist() == [30, 30, 0, 20, 10]  # [10,30]+[50,60]; [20,30]+[50,70]
    assert per_rank == {0: 40, 1: 30}  # rank 0: [10,30]+[50,70] once; rank 1: its waits whole


@st.composite
def _cases(draw):
    ranks = draw(st.lists(st.integers(0, 2000), min_size=1, max_size=4, unique=True))
    free, rows = {}, []
    for r in ranks:
        if draw(st.booleans()):
            cuts = sorted(set(draw(st.lists(st.integers(-50, 300), max_size=10))))
            cuts = cuts[:len(cuts) // 2 * 2]
            free[r] = (np.array(cuts[0::2], np.int64), np.array(cuts[1::2], np.int64))
        elif draw(st.booleans()):
            free[r] = None
        for _ in range(draw(st.integers(0, 5))):
            x, y = draw(st.integers(-100, 350)), draw(st.integers(-100, 350))
            rows.append((r, x, y))
    return free, rows


def _reference(free, rows):
    """Per row: |[a, b] ∩ U| by a sum over the union's intervals; per rank: the same over the union of its waits,
    by brute force over integer nanoseconds. A rank without a union: its waits whole."""
    per_row, per_rank = [], {}
    for r, a, b in rows:
        u = free.get(r)
        per_row.append(0 if b <= a else (b - a) if u is None else
                       sum(max(0, min(b, e) - max(a, s)) for s, e in zip(u[0].tolist(), u[1].tolist())))
    for r in {x[0] for x in rows}:
        u = free.get(r)
        covered = set()
        for rr, a, b in rows:
            if rr == r:
                covered.update(range(a, b))
        if u is not None:
            covered = {t for t in covered if any(s <= t < e for s, e in zip(u[0].tolist(), u[1].tolist()))}
        if covered:
            per_rank[r] = len(covered)
    return per_row, per_rank


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_matches_a_per_row_reference(case):
    free, rows = case
    rank, a, b = (np.array([x[i] for x in rows], np.int64) for i in range(3))
    per_row, per_rank = exposed_waits(free, rank, a, b)
    ref_row, ref_rank = _reference(free, rows)
    assert per_row.tolist() == ref_row
    assert per_rank == ref_rank
