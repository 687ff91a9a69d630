"""The report's per-step block and the headline's step basis (diagnose.model.steps: medians over ranks, the
median step, outlier steps); the terminal prints the same numbers."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.step_cap import note
from llmdiag.diagnose.model.steps import step_span, steps_of


def step_view(a: Analysis, num) -> dict:
    """Rows of the per-step table and the headline's words. `num` is reports.context.Num; numbers carry their
    summary path where the analysis holds its step summary (a summary from before it: derived, no path)."""
    ss = steps_of(a)
    if ss is None:
        return {"rows": [], "span": "", "median": None, "outliers": [], "factor": None, "note": ""}
    held = a.steps is not None
    key = (lambda i, k: f"steps.steps.{i}.{k}") if held else (lambda i, k: None)
    rows = [{"row": s, "time": num(s.time_ms, key(i, "time_ms"), "ms"), "max": num(s.time_max_ms, key(i, "time_max_ms"), "ms"),
             "compute": num(s.compute_ms, key(i, "compute_ms"), "ms"),
             "exposed": num(s.exposed_comm_ms, key(i, "exposed_comm_ms"), "ms"), "idle": num(s.idle_ms, key(i, "idle_ms"), "ms"),
             "ratio": num(s.ratio, key(i, "ratio"), "x")} for i, s in enumerate(ss.steps)]
    return {"rows": rows, "span": step_span(ss.numbers), "note": note(a),
            "median": num(ss.median_ms, "steps.median_ms" if held else None, "ms") if len(ss.steps) > 1 else None,
            "outliers": [r for r in rows if r["row"].outlier], "factor": num(ss.outlier_factor, None, "x")}
