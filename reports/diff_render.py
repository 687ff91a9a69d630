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


def render_diff_html(comparison) -> str:
    """`comparison`: a `diagnose.gate.diff.Comparison` (read by attribute; the report does not import the gate)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt  # {{ value | fmt(unit) }}
    env.filters["delta"] = lambda r: fmt_delta(r.delta, r.unit, r.a)  # {{ row | delta }}: B − A of a diff row
    return env.get_template("diff.html.j2").render(c=comparison)
