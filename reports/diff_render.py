"""HTML for `llmdiag diff --html`: one self-contained page (inline CSS, no scripts, no network).

The template lives in reports/templates/ (the folder the package data ships) and is rendered with
autoescape on: kernel names and paths come from foreign traces and must never become markup. Numbers go
through the one formatter (`diagnose.model.format`), so the page reads like the terminal diff and the report.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from diagnose.model.format import fmt, fmt_delta

TEMPLATES = Path(__file__).parent / "templates"


CHART_ROWS = 12


def chart_rows(comparison, n: int = CHART_ROWS) -> list[dict]:
    """The rows with a known good direction and a relative change, largest change first (per-rank rows
    left out): name, change in % (clamped to ±100 for the bar), effect, and the change as the tables print it
    (percentage points for shares, so a 4.4 % → 2.8 % overlap reads −1.6 pt, not −36 %)."""
    rows = [r for s in comparison.sections if not s.title.startswith("Per rank") for r in s.rows
            if r.effect and r.rel is not None]
    rows.sort(key=lambda r: -abs(r.rel))
    return [{"name": r.name.strip(), "pct": r.rel * 100, "w": min(abs(r.rel), 1.0) * 180, "neg": r.rel < 0,
             "effect": r.effect, "label": fmt_delta(r.delta, r.unit, r.a)} for r in rows[:n]]


def render_diff_html(comparison) -> str:
    """`comparison`: a `diagnose.gate.diff.Comparison` (read by attribute; the report does not import the gate)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt  # {{ value | fmt(unit) }}
    env.filters["delta"] = lambda r: fmt_delta(r.delta, r.unit, r.a)  # {{ row | delta }}: B − A of a diff row
    return env.get_template("diff.html.j2").render(c=comparison, chart=chart_rows(comparison))
