"""HTML for `llmdiag diff --html`: one self-contained page (inline CSS, no scripts, no network).

The template lives in reports/templates/ (the folder the package data ships) and is rendered with
autoescape on: kernel names and paths come from foreign traces and must never become markup.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from diagnose.gate.diff import fmt, fmt_change

TEMPLATES = Path(__file__).parent / "templates"


def render_diff_html(comparison: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = lambda v, unit: fmt(unit, v)
    env.globals["fmt_change"] = fmt_change
    return env.get_template("diff.html.j2").render(c=comparison)
