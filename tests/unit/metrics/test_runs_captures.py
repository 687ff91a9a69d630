"""Several captures of one process with no rank (issue 27, kineto's resnet50 samples): runs, not ranks.

torch.profiler's `tensorboard_trace_handler` names a capture `<worker>.<epoch ms>.pt.trace.json.gz`; a folder of
two or three of one worker, minutes apart, with no distributedInfo, is one process profiled several times: each
capture is a run of a one-rank job, the newest analysed by default, `--run` picks another. A 2-rank job without
distributedInfo whose files overlap in time stays 2 ranks (same worker name or not). Traces generated here.
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path, analyze_runs
from tests.gen.builder import TraceBuilder

MINUTE_US = 60_000_000
EPOCH_US = 1_700_000_000_000_000  # 2023-11-14 in epoch µs, as the 2021 schema writes ts


def _capture(folder, worker: str, start_us: int, first_step: int, pid: int = 4242, write_ms: int = 5) -> str:
    """A rank-less capture of 3 steps (1 ms each, one 600 µs kernel) at `start_us`, named by the handler."""
    b = TraceBuilder(rank=None, world_size=None, distributed=False, base_us=start_us, pid=pid)
    for i in range(3):
        k0 = i * 1000
        b.step(first_step + i, k0, k0 + 1000)
        b.kernel("void gemm_kernel<float>()", k0 + 100, 600, launch_at=k0 + 10)
    written_ms = start_us // 1000 + write_ms  # the handler names the file when it writes it
    return b.write(folder / f"{worker}.{written_ms}.pt.trace.json.gz")


@pytest.mark.parametrize("n", [2, 3])
def test_captures_of_one_worker_are_runs(tmp_path, n):
    for k in range(n):  # minutes apart, steps numbered on as the profiler does
        _capture(tmp_path, "worker0", EPOCH_US + k * 8 * MINUTE_US, 5 + 11 * k)
    a = analyze_path(str(tmp_path), jobs=1)
    assert len(a.ranks) == 1 and [s.step for s in a.ranks[0].steps] == [5 + 11 * (n - 1) + i for i in range(3)]
    assert len(a.runs) == n and [r.analysed for r in a.runs] == [False] * (n - 1) + [True]
    msg = a.issues[0].message
    assert f"{n} captures of the same process" in msg and "worker `worker0`" in msg and f"Analysed run {n}" in msg
    assert not any("appears in" in i.message for i in a.issues)
    every = analyze_runs(str(tmp_path), jobs=1, run="all")
    assert [[s.step for s in x.ranks[0].steps][0] for x in every] == [5 + 11 * k for k in range(n)]
    first = analyze_path(str(tmp_path), jobs=1, run=1)
    assert [s.step for s in first.ranks[0].steps] == [5, 6, 7]


@pytest.mark.parametrize("same_name", [True, False])
def test_two_ranks_overlapping_in_time_stay_ranks(tmp_path, same_name):
    """Two processes profiled together (no distributedInfo): their spans overlap, so they are 2 ranks of one
    run, whether the user gave both workers one name or the handler named them host_pid."""
    names = ("worker0", "worker0") if same_name else ("host_101", "host_102")
    _capture(tmp_path, names[0], EPOCH_US, 5, pid=101)
    _capture(tmp_path, names[1], EPOCH_US + 200, 5, pid=102, write_ms=9)  # 0.2 ms later: the same steps
    a = analyze_path(str(tmp_path), jobs=1)
    assert len(a.ranks) == 2 and not a.runs
    assert not any("captures" in i.message for i in a.issues)


def test_distinct_workers_apart_in_time_are_not_split(tmp_path):
    """Rank-less files of two different workers: nothing says they are copies of one process: one group (the
    numbering by file order names them, as before)."""
    _capture(tmp_path, "worker0", EPOCH_US, 5)
    _capture(tmp_path, "worker1", EPOCH_US + 8 * MINUTE_US, 16)
    a = analyze_path(str(tmp_path), jobs=1)
    assert not a.runs and len(a.ranks) == 2
