"""The critical-path section of the report (rows from diagnose.model.critical_path_view, which the terminal prints
too); the path's length carries its summary path."""

from __future__ import annotations

from markupsafe import Markup

from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.critical_path_view import (CP_COLUMNS, CP_HEADER, CP_NOTE, JOB_NOTE, TYPICAL_NOTE,
                                                      critical_path_rows, job_path_view, job_path_words,
                                                      job_unstated_words, typical_rows, unstated_words)

MAX_RANKS = 32


def critical_path_view(a: Analysis, num) -> dict | None:
    """{"header", "note", "rows", "more", "job", "unstated", "job_unstated"}; None when no rank has a critical path
    and none is withheld (CPU traces)."""
    rows, n = critical_path_rows(a, MAX_RANKS)
    unstated = unstated_words(a)  # event-sampled ranks: no row, the reason instead
    if not rows and not unstated:
        return None
    out = []
    for x in rows:
        p = f"ranks.{x.index}.critical_path."
        out.append({"rank": x.rank, "length": num(x.path.length_ms, p + "length_ms", "ms"),
                    # the summary holds percent, the report's pct unit a share: derived values, untagged
                    "parts": [num(getattr(x.path, f) / 100, None, "pct") for _, f in CP_COLUMNS],
                    "cause": x.top_cause, "share": num(x.top_share / 100 if x.top_share is not None else None, None,
                                                       "pct", True)})
    typical = [Markup(t) for t in typical_rows(a, rows, lambda x, k: num(x, k, "ms").__html__(),
                                               lambda x: num(x / 100, None, "pct", True).__html__())]
    return {"header": CP_HEADER, "note": CP_NOTE, "rows": out, "more": n - len(rows), "job": _job(a, num),
            "typical": typical, "typical_note": TYPICAL_NOTE,  # our words, rank numbers and tagged numbers
            "unstated": unstated, "job_unstated": job_unstated_words(a)}  # our words and rank numbers only


def _job(a: Analysis, num) -> dict | None:
    """The job's path as one paragraph whose numbers carry their summary paths (shares: derived, untagged)."""
    v = job_path_view(a)
    if v is None:
        return None
    text = job_path_words(v, lambda x, k: num(x, k, "ms").__html__(),
                          lambda x: num(x / 100, None, "pct", True).__html__())
    return {"text": Markup(text), "note": JOB_NOTE}  # our words, ranks as numbers and tagged numbers: no trace text
