"""Per-step numbers over ranks, and which step a quantity concentrates in.

A profiled window is often three steps, and one of them can take 2-3x the others (allocator warm-up, a
checkpoint, a recompile). A mean over such steps describes no step, so the summary keeps every step's
numbers (`StepSummary`), the headline says which steps its mean covers and what the median step is, an
outlier step is named, and rules can ask `concentrated` whether what they measured happened in one step.

Over ranks a step's numbers are medians (ranks of a synchronous job take the same step time; the median
is not moved by one late capture), with the slowest rank kept beside it. Over steps the summary gives the
median step; the mean over ranks and steps stays `aggregate.step_time_ms`, unchanged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.dc import dataclass, field

OUTLIER_FACTOR = 1.5  # a step longer than this × the median step is named an outlier
CONCENTRATION_SHARE = 0.5  # `concentrated`: the step holds at least this share of the total ...
CONCENTRATION_RATIO = 3.0  # ... and at least this × the median of the other steps


@dataclass
class StepStat:
    """One ProfilerStep over the ranks that have it (ms; medians over those ranks unless named max)."""

    step: int  # ProfilerStep#N (-1: the trace has no ProfilerStep, one window)
    ranks: int  # ranks that have this step
    time_ms: float  # median over those ranks of the step's duration
    time_max_ms: float  # the slowest rank's duration
    max_rank: int  # the slowest rank (the lowest such rank on a tie)
    compute_ms: float  # median |U(compute)|
    exposed_comm_ms: float  # median |U(comm) − U(compute)|
    idle_ms: float  # median time with nothing running
    ratio: float | None = None  # time_ms / the median step (None with one step)
    outlier: bool = False  # time_ms > OUTLIER_FACTOR × the median step


@dataclass
class StepSummary:
    """The steps of the analysis in step order; `median_ms` is the median over steps of `StepStat.time_ms`."""

    steps: list[StepStat] = field(default_factory=list)
    median_ms: float | None = None
    outliers: list[int] = field(default_factory=list)  # step numbers flagged `outlier`
    outlier_factor: float = OUTLIER_FACTOR
    total: int | None = None  # steps over the ranks where `steps` keeps only some (model/step_cap.py); None: all

    @property
    def numbers(self) -> list[int]:
        return [s.step for s in self.steps]


@dataclass(frozen=True)
class Concentration:
    """The one step in which a per-step quantity concentrates, and its share of the total."""

    step: int
    value: float  # the quantity in that step
    share: float  # of the total over all steps, in [0, 1]


def concentrated(values: Mapping[int, float], share: float = CONCENTRATION_SHARE,
                 ratio: float = CONCENTRATION_RATIO) -> Concentration | None:
    """The one step in which a quantity measured per step concentrates, or None.

    `values` maps step number -> the quantity in that step (ms, bytes, calls: ≥ 0), aggregated over ranks
    the same way for every step (a sum or a median: the caller's choice). Non-finite and negative values
    are ignored. A step is returned only when at least two steps have values, the total is positive, the
    largest step holds at least `share` of the total, and it is at least `ratio` × the median of the other
    steps (so two steps qualify only from 3:1 on, and a quantity spread evenly never does). Ties for the
    largest: None. A rule that averages the quantity over steps then says "mostly in step N (X of Y)".
    """
    xs = {int(k): float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v) and v >= 0}
    if len(xs) < 2:
        return None
    total = sum(xs.values())
    if total <= 0:
        return None
    ordered = sorted(xs.items(), key=lambda kv: (-kv[1], kv[0]))
    (step, top), (_, second) = ordered[0], ordered[1]
    if top == second:
        return None
    rest = statistics.median(v for _, v in ordered[1:])
    if top / total < share or top < ratio * rest:
        return None
    return Concentration(step, top, top / total)


def step_values(ranks, field: str) -> dict[int, float]:
    """step -> the sum over ranks of one `StepBreakdown` field (`idle_ms`, `exposed_comm_ms`, ...): what
    `concentrated` takes for a quantity the per-step breakdown already holds."""
    out: dict[int, float] = defaultdict(float)
    for r in ranks:
        for st in r.steps:
            out[st.step] += getattr(st, field)
    return dict(out)


def outlier_steps(values: Mapping[int, float], factor: float = OUTLIER_FACTOR) -> list[int]:
    """Steps whose value is above `factor` × the median over steps (none with fewer than two steps; with two
    the median is their mean, so one is flagged only when it is over 3× the other at the default 1.5)."""
    xs = {k: v for k, v in values.items() if math.isfinite(v)}
    if len(xs) < 2:
        return []
    med = statistics.median(xs.values())
    return sorted(k for k, v in xs.items() if med > 0 and v > factor * med)


def step_span(steps: Iterable[int]) -> str:
    """'steps 4-6', 'step 5', 'steps 2, 4, 7': the steps a number covers, in words."""
    ns = sorted(set(steps))
    if not ns or ns == [-1]:
        return "one window (no ProfilerStep)"
    if len(ns) == 1:
        return f"step {ns[0]}"
    if ns[-1] - ns[0] + 1 == len(ns):  # contiguous, by arithmetic: a step 2^62 built a list of 2^62 before
        return f"steps {ns[0]}–{ns[-1]}"
    return "steps " + ", ".join(map(str, ns[:20])) + (f" and {len(ns) - 20} more" if len(ns) > 20 else "")


def step_summary(ranks, factor: float = OUTLIER_FACTOR) -> StepSummary | None:
    """Every step over the ranks that have it, from each rank's exact per-step breakdown (`RankMetrics.steps`:
    anything with `.rank` and `.steps`), so a summary read back gives the same numbers; None where no rank
    has a step. Linear in ranks × steps."""
    acc: dict[int, list] = defaultdict(list)
    for r in ranks:
        for st in r.steps:
            acc[st.step].append((st, r.rank))
    if not acc:
        return None
    rows = []
    for n in sorted(acc):
        xs = acc[n]
        if len(xs) == 1:  # one rank's step is its own median and slowest: no per-step max/median calls (issue 35)
            (st, rank), = xs
            rows.append(StepStat(n, 1, float(st.time_ms), float(st.time_ms), rank, float(st.compute_ms),
                                 float(st.exposed_comm_ms), float(st.idle_ms)))
            continue
        slow, rank = max(xs, key=lambda x: (x[0].time_ms, -x[1]))
        med = lambda f: float(statistics.median([f(st) for st, _ in xs]))
        rows.append(StepStat(n, len(xs), med(lambda s: s.time_ms), float(slow.time_ms), rank,
                             med(lambda s: s.compute_ms), med(lambda s: s.exposed_comm_ms), med(lambda s: s.idle_ms)))
    median = float(statistics.median([s.time_ms for s in rows]))
    flagged = set(outlier_steps({s.step: s.time_ms for s in rows}, factor))
    for s in rows:
        s.ratio = s.time_ms / median if len(rows) > 1 and median > 0 else None
        s.outlier = s.step in flagged
    return StepSummary(rows, median, sorted(flagged), factor)


def steps_of(a) -> StepSummary | None:
    """The analysis' step summary: the one it carries, else (a summary written before it existed, an analysis
    built by hand) computed from its ranks the same way."""
    return a.steps if getattr(a, "steps", None) is not None else step_summary(a.ranks)
