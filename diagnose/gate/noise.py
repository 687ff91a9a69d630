"""How much a gated number moves with no change at all: the noise unit (σ) of a "1.5σ" limit.

A shared CI runner makes every timing noisy, and by different amounts on different machines, so a blanket limit
("500 %") is either too loose to catch anything or too tight to pass. A limit in σ is measured instead, from the
baseline itself:
- step to step: the spread of the metric's per-step values within each rank (pooled over ranks: the root of the
  mean per-rank variance). A rank's value is a mean over a handful of steps that vary this much. The job's
  critical path has one series, its `per_step` (gate/path.py);
- rank to rank: the spread of the ranks' values (population standard deviation). In a job whose ranks do the
  same work, which rank comes out worst is chance, so a worst-rank gate sees this spread too;
- run to run, where the user recorded repeated baseline runs (`check --noise-from`): the sample standard
  deviation of the aggregate over the baseline and its repeats. One run cannot show how a machine's load varies
  between runs; repeats can.
σ = √(step² + rank² + run²). The multiplier is the user's (baselines/gates.toml: 1.5σ, chosen from the
measurement in docs/ci.md). A metric without per-step values (the memory peak, pipeline bubbles) has only
the rank and run parts; σ is never below `floor`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from llmdiag.diagnose.gate.limits import Metric, PathMetric
from llmdiag.diagnose.gate.path import step_series
from llmdiag.diagnose.gate.values import aggregate, units
from llmdiag.diagnose.model.analysis import Analysis, StepBreakdown


def _exposed(s: StepBreakdown) -> float | None:
    return s.exposed_comm_ms / s.time_ms if s.time_ms > 0 else None


# metric -> its value in one step, where steps have it
PER_STEP: dict[str, Callable[[StepBreakdown], float | None]] = {
    "step_time": lambda s: s.time_ms,
    "overlap_ratio": lambda s: s.overlap_ratio,
    "exposed_comm": _exposed,
}


def _finite(vals) -> list[float]:
    return [float(v) for v in vals if v is not None and math.isfinite(v)]


def step_spread(a: Analysis, m: Metric) -> float:
    """Pooled within-rank standard deviation of the per-step values (0 where there are none)."""
    if isinstance(m, PathMetric):  # the job path's steps, or each rank's steps' paths
        series = [_finite(s) for s in step_series(a, m)]
    elif (get := PER_STEP.get(m.name)) is not None:
        series = [_finite(map(get, r.steps)) for r in a.ranks]
    else:
        return 0.0
    variances = [statistics.variance(v) for v in series if len(v) >= 2]
    return math.sqrt(statistics.fmean(variances)) if variances else 0.0


def rank_spread(a: Analysis, m: Metric) -> float:
    """Standard deviation of the ranks' (pipeline ranks') values."""
    vals = _finite(v for _, v in units(a, m).values())
    return statistics.pstdev(vals) if len(vals) >= 2 else 0.0


def run_spread(sides: list[Analysis], m: Metric, agg: str) -> float:
    """Sample standard deviation of the aggregate over repeated baseline runs (0 with fewer than two)."""
    vals = _finite(aggregate(a, m, agg)[0] for a in sides)
    return statistics.stdev(vals) if len(vals) >= 2 else 0.0


FLOOR_POINTS = 0.01  # a ratio's σ is at least 1 point ...
FLOOR_REL = 0.01  # ... a time's or size's at least 1 % of the baseline's value


def floor(m: Metric, baseline_value: float | None) -> float:
    """The smallest σ: a baseline with one rank and no per-step values (a hand-made summary) shows no spread,
    which is no evidence that its number never moves; zero would fail the gate on any rounding."""
    if m.unit == "ratio":
        return FLOOR_POINTS
    return FLOOR_REL * abs(baseline_value) if baseline_value is not None else 0.0


def sigma(base: Analysis, m: Metric, agg: str, repeats: list[Analysis] | tuple = ()) -> float:
    """The noise unit of `m` under `agg`, in the metric's unit (at least `floor`)."""
    parts = (step_spread(base, m), rank_spread(base, m), run_spread([base, *repeats], m, agg))
    return max(math.sqrt(sum(p * p for p in parts)), floor(m, aggregate(base, m, agg)[0]))
