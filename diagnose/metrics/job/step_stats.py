"""The analysis' step summary (model/steps.py says why) and a warning per outlier step, so every output
(terminal, report, summary) names the step beside the mean it moves."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Analysis, Issue, RankMetrics
from llmdiag.diagnose.model.fields import FIELDS
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.steps import StepSummary, step_span, step_summary


# the parts an outlier step's excess is looked for in, named as the registry names them (model/fields.py)
MAX_STEP_WARNINGS = 10  # outlier steps named one warning each; the rest are counted in one more

PARTS = tuple((FIELDS[k].label, k) for k in ("idle_ms", "compute_ms", "exposed_comm_ms"))


def add_step_summary(a: Analysis) -> None:
    """Sets `a.steps` and adds its warnings (step_section): for an Analysis built without a Job (op tables)."""
    a.steps, more = step_section(a.ranks, a.source)
    a.issues.extend(more)


def step_section(ranks: list[RankMetrics], source: str) -> tuple[StepSummary | None, list[Issue]]:
    """The step summary over `ranks` and one warning per outlier step: its number, duration and ratio to the
    median, and the part of the step (idle, compute, exposed comm; medians over ranks) holding most of its
    excess over the median step where one part holds more than half of it."""
    steps = step_summary(ranks)
    issues: list[Issue] = []
    if steps is None:
        return None, issues
    span = step_span(steps.numbers)
    rows = steps.steps
    medians = {label: statistics.median(getattr(x, key) for x in rows) for label, key in PARTS}
    outliers = [s for s in rows if s.outlier]
    named = sorted(sorted(outliers, key=lambda s: (-s.time_ms, s.step))[:MAX_STEP_WARNINGS], key=lambda s: s.step)
    for s in named:  # one warning per outlier step, the slowest MAX_STEP_WARNINGS (unbounded before: 10^5 lines)
        if s.outlier:
            label, key = max(PARTS, key=lambda p: getattr(s, p[1]) - medians[p[0]])
            more = getattr(s, key) - medians[label]
            part = (f"; most of the excess is {label} ({fmt(getattr(s, key), 'ms')} against a median of "
                    f"{fmt(medians[label], 'ms')} per step)") if more > 0.5 * (s.time_ms - steps.median_ms) else ""
            issues.append(Issue(source, (
                f"step {s.step} took {fmt(s.time_ms, 'ms')} (median over its {s.ranks} rank"
                f"{'s' if s.ranks != 1 else ''}), {fmt(s.ratio, 'x')} the median step of {fmt(steps.median_ms, 'ms')} "
                f"over {span}{part}: means over steps (the headline's mean step time, per-step averages in findings) "
                "include it; the per-step table shows it"), None, "warning"))
    if len(outliers) > len(named):
        shown = {id(s) for s in named}
        rest = [s for s in outliers if id(s) not in shown]
        issues.append(Issue(source, (
            f"{len(rest)} more outlier steps (over {fmt(steps.outlier_factor, 'x')} the median step of "
            f"{fmt(steps.median_ms, 'ms')}), {step_span([s.step for s in rest])}, up to "
            f"{fmt(max(s.time_ms for s in rest), 'ms')}: named once here, the {len(named)} slowest each above"),
            None, "warning"))
    return steps, issues
