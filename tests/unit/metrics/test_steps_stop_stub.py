"""The profiler's stop is no step (metrics/rank/steps.py `_stop_stub`): a last ProfilerStep in which no host event
starts and nothing is launched is left out of the steps; one that holds any op, or one not last, stays. Every
answer is the placed durations, by hand."""

from __future__ import annotations

import pytest
from pytest import approx

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder


def _one(tmp_path, b, **kw):
    p = b.write(tmp_path / "rank0.json")
    (r,) = analyze_path(str(p), rules=False, **kw).ranks
    return r


def _job(last_op: bool = False, empty_middle: bool = False) -> TraceBuilder:
    """Steps #1 [0, 1000] and #2 [1000, 2000] each launch a 300 µs kernel; #3 [2000, 2050] is the stub (with
    `last_op`, a 10 µs op runs in it); with `empty_middle`, #2 holds nothing (its kernel is not placed)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 5, 10)
    b.kernel("void k()", 100, 300, launch_at=10)
    b.step(2, 1000, 2000)
    if not empty_middle:
        b.cpu_op("aten::mm", 1005, 10)
        b.kernel("void k()", 1100, 300, launch_at=1010)
    b.step(3, 2000, 2050)
    if last_op:
        b.cpu_op("aten::empty", 2010, 10)
    return b


def test_trailing_empty_step_is_the_profilers_stop(tmp_path):
    r = _one(tmp_path, _job())
    assert [s.step for s in r.steps] == [1, 2]
    assert r.step_time_ms == approx(0.3)  # (0.3 + 0.3) / 2: the 0.05 ms stub no longer halves the mean
    assert any("#3, 0.05 ms" in w and "profiler stopping" in w for w in r.warnings)


def test_trailing_step_with_an_op_is_a_step(tmp_path):
    r = _one(tmp_path, _job(last_op=True))
    assert [s.step for s in r.steps] == [1, 2, 3]
    assert r.steps[2].time_ms == approx(0.05)  # no GPU work: its host span
    assert not any("profiler stopping" in w for w in r.warnings)


def test_empty_step_before_the_last_stays(tmp_path):
    r = _one(tmp_path, _job(empty_middle=True, last_op=True))
    assert [s.step for s in r.steps] == [1, 2, 3]


@pytest.mark.parametrize("exclude_last", [True, False])
def test_stub_counts_as_the_excluded_last_step(tmp_path, exclude_last):
    """HTA's convention drops the capture's last ProfilerStep: where that is the stub, no iteration goes with it."""
    r = _one(tmp_path, _job(), exclude_last_step=exclude_last)
    assert [s.step for s in r.steps] == [1, 2]


def test_lone_step_is_never_dropped(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 50)
    b.cpu_op("aten::mm", 5, 10)
    b.kernel("void k()", 100, 300, launch_at=10)
    b.step(2, 60, 80)
    r = _one(tmp_path, b)
    assert [s.step for s in r.steps] == [1]
    c = TraceBuilder()
    c.step(7, 0, 50)
    assert [s.step for s in _one(tmp_path, c).steps] == [7]
