"""A rank's per-step work is linear with a small constant (issue 35: 100,000 ProfilerSteps took ~30 s).

Before, `step_breakdowns` clipped the three busy unions to each window (~55 Python calls a step) and
`bound_values` walked every field of every step row (~39 a step). Pinned here without timing: the Python calls
each makes at 100,000 steps are counted (one StepBreakdown per step is the floor), and the breakdowns are
checked against the per-window clipping they replace, written out here, on random overlapping unions.
"""

from __future__ import annotations

import dataclasses
import random
import gc
import sys

import numpy as np

from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.overlap import Timeline, step_breakdowns
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.analysis import StepBreakdown
from llmdiag.diagnose.model.bounds import bound_values
from llmdiag.diagnose.model.format import NS_PER_MS

N = 100_000


def _python_calls(fn) -> int:
    """Python function calls (generator resumptions included) made while fn runs: C work is not counted."""
    n = 0

    def count(frame, event, arg):
        nonlocal n
        n += event == "call"

    # the collector paused: callbacks other modules hang on it (distributed's GC diagnostics, once a Dask test ran
    # in the same process) would be counted as this code's calls
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return n


def _random_union(rng: random.Random, span: int, n: int) -> iv.Union:
    s = np.array([rng.randrange(0, span) for _ in range(n)], np.int64)
    return iv.union(s, s + np.array([rng.randrange(0, 3000) for _ in range(n)], np.int64))


def _timeline(rng: random.Random, span: int, n: int) -> Timeline:
    return Timeline(_random_union(rng, span, n), _random_union(rng, span, n), _random_union(rng, span, n // 3))


def _windows(rng: random.Random, n: int) -> list[Window]:
    wins, t = [], 0
    for k in range(1, n + 1):
        d = rng.choice([0, 1, 1000, 1500, 7000])  # empty and one-ns windows too
        wins.append(Window(k, t, t + d, t, t + d))
        t += d + rng.choice([0, 0, 50])
    return wins


def _per_window(tl: Timeline, wins: list[Window]) -> list[StepBreakdown]:
    """The definition, window by window (the code before issue 35)."""
    out = []
    for w in wins:
        comp, comm, other = (iv.within(u, w.start, w.end) for u in (tl.compute, tl.comm, tl.other))
        t_comp, t_comm = iv.total(comp), iv.total(comm)
        ov = iv.intersect_total(comm, comp)
        busy = iv.total(iv.union_of(comp, comm, other))
        step = w.end - w.start
        out.append(StepBreakdown(w.step, w.start / NS_PER_MS, step / NS_PER_MS, t_comp / NS_PER_MS, t_comm / NS_PER_MS,
                                 ov / NS_PER_MS, (t_comm - ov) / NS_PER_MS, (t_comp - ov) / NS_PER_MS,
                                 (busy - t_comp - t_comm + ov) / NS_PER_MS, (step - busy) / NS_PER_MS,
                                 (ov / t_comm) if t_comm > 0 else None))
    return out


def test_breakdowns_equal_the_per_window_definition():
    for seed in range(5):
        rng = random.Random(seed)
        wins = _windows(rng, 300)
        tl = _timeline(rng, wins[-1].end + 2000, 400)
        assert step_breakdowns(tl, wins) == _per_window(tl, wins)  # every float equal, not close
    empty = Timeline(*(iv.union(np.zeros(0, np.int64), np.zeros(0, np.int64)) for _ in range(3)))
    wins = _windows(random.Random(9), 20)
    assert step_breakdowns(empty, wins) == _per_window(empty, wins)
    assert step_breakdowns(empty, []) == []


def test_100000_steps_make_one_python_call_each():
    rng = random.Random(35)
    wins = _windows(rng, N)
    tl = _timeline(rng, wins[-1].end, 2 * N)
    out: list = []
    calls = _python_calls(lambda: out.append(step_breakdowns(tl, wins)))
    assert len(out[0]) == N
    assert calls <= N + 200, calls  # one StepBreakdown.__init__ a step, the rest constant (before: 5,536,941)

    @dataclasses.dataclass
    class Metrics:
        steps: list
        step_time_ms: float = 1.0

    m = Metrics(out[0])
    warnings: list = []
    calls = _python_calls(lambda: warnings.extend(bound_values(m)))
    assert warnings == [] and calls <= 200, calls  # the rows are checked per column (before: 3,900,007)


def test_rows_that_need_fixing_are_still_walked_and_named():
    """The per-column check only skips rows the walk would leave alone; an int beyond int64 in one row of many
    is still named with its index, and mixed rows still walk."""
    rows = [StepBreakdown(k, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.5, 0.0, 0.5, None) for k in range(1, 6)]
    rows[3].step = 2**70

    @dataclasses.dataclass
    class Metrics:
        steps: list

    m = Metrics(rows)
    assert bound_values(m) == ["invalid value: steps[3].step = 1.1805916207174113e+21 (beyond int64)"]
    assert rows[3].step == float(2**70) and rows[2].step == 3
    mixed = Metrics([StepBreakdown(1, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.5, 0.0, 0.5, None), {"x": 2**64}])
    assert bound_values(mixed) == ["invalid value: steps[1].x = 1.8446744073709552e+19 (beyond int64)"]
