"""The analysis' step summary (model/steps.py says why) and a warning per outlier step, so every output
(terminal, report, summary) names the step beside the mean it moves."""

from __future__ import annotations

from diagnose.model.analysis import Analysis, Issue
from diagnose.model.format import fmt
from diagnose.model.steps import step_span, step_summary


def add_step_summary(a: Analysis) -> None:
    """Sets `a.steps` and adds one warning per outlier step: its number, duration and ratio to the median."""
    a.steps = step_summary(a.ranks)
    if a.steps is None:
        return
    span = step_span(a.steps.numbers)
    for s in a.steps.steps:
        if s.outlier:
            a.issues.append(Issue(a.source, (
                f"step {s.step} took {fmt(s.time_ms, 'ms')} (median over its {s.ranks} rank"
                f"{'s' if s.ranks != 1 else ''}), {fmt(s.ratio, 'x')} the median step of {fmt(a.steps.median_ms, 'ms')} "
                f"over {span}: means over steps (the headline's mean step time, per-step averages in findings) "
                "include it; the per-step table shows each step"), None, "warning"))
