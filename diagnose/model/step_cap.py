"""How many per-step rows an analysis keeps: the one cap every output reads.

One CPU rank with 100,000 ProfilerSteps (a 1.4 MB gzip) wrote an 85 MB summary and a 141 MB report (a table
row and an SVG bar per step) and took 1.2 GB of memory. Above MAX_STEP_ROWS steps the analysis keeps the
rows that tell the story, chosen once here from the step summary (model/steps.py): the first and the last
step, the median step, and the slowest steps (every outlier among them, the slowest first); every rank keeps
its rows of those steps. What is computed over steps (the mean step time, the median step, each rank's
per-step means, the outlier flags, the rules) was computed before, over every step, and is unchanged;
`StepSummary.total` and `RankMetrics.steps_total` say how many steps there were, so per-step divisions of a
summary read back stay right, and `note` is the one sentence the report and the terminal print.
"""

from __future__ import annotations

MAX_STEP_ROWS = 200  # per-step rows kept: a table a reader scans, a chart whose bars stay visible


def keep(stats: list, cap: int = MAX_STEP_ROWS) -> set[int] | None:
    """Step numbers to keep from `stats` (StepStat rows in step order), or None when all fit."""
    if len(stats) <= cap:
        return None
    by_time = sorted(stats, key=lambda s: (_num(s.time_ms), _num(s.step)))  # a summary read back may hold nulls
    chosen = {stats[0].step, stats[-1].step, by_time[len(by_time) // 2].step}
    for s in reversed(by_time):  # the slowest, until the cap
        if len(chosen) >= cap:
            break
        chosen.add(s.step)
    return chosen


def _num(v) -> float:
    return float(v) if isinstance(v, int | float) and v == v else float("-inf")


def cap_steps(a, cap: int = MAX_STEP_ROWS) -> None:
    """Cut `a`'s per-step rows (its step summary's and every rank's) to `keep`'s steps, in place; a no-op at or
    under the cap and on an analysis already cut."""
    ss = getattr(a, "steps", None)
    if ss is None or (chosen := keep(ss.steps, cap)) is None:
        return
    ss.total = ss.total or len(ss.steps)
    ss.steps = [s for s in ss.steps if s.step in chosen]
    ss.outliers = [n for n in ss.outliers if n in chosen]
    for r in a.ranks:
        if len(r.steps) > len(chosen) or any(st.step not in chosen for st in r.steps):
            r.steps_total = r.steps_total or len(r.steps)
            r.steps = [st for st in r.steps if st.step in chosen]


def note(a) -> str:
    """The sentence that says the per-step rows were cut ("" when they were not)."""
    ss = getattr(a, "steps", None)
    if ss is None or not ss.total or ss.total <= len(ss.steps):
        return ""
    n_out = sum(1 for s in ss.steps if s.outlier)
    return (f"{ss.total:,} steps: {len(ss.steps)} are shown (the first, the last, the median step and the slowest"
            f"{f', {n_out} outliers among them' if n_out else ''}); the mean and median step and every per-rank "
            "mean cover all the steps")
