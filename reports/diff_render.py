"""HTML for `llmdiag diff --html`: one self-contained page (inline CSS, no scripts, no network).

The template lives in reports/templates/ (the folder the package data ships) and is rendered with
autoescape on: kernel names and paths come from foreign traces and must never become markup. Numbers go
through the one formatter (`llmdiag.diagnose.model.format`), so the page reads like the terminal diff and the report.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from llmdiag.diagnose.model.format import fmt, fmt_delta
from llmdiag.reports.template_cache import TemplateCache, fingerprint

TEMPLATES = Path(__file__).parent / "templates"


CHART_ROWS = 12
# The chart's columns in viewBox units (the SVG scales with the page, text with it): names right-aligned in
# [0, NAME_END], the change as printed right-aligned at LABEL_END, bars from ZERO by up to BAR either way. Text
# and bars never share a column, so a long label cannot run over a name and no label runs off the edge.
NAME_END, NAME_CHARS, LABEL_END, ZERO, BAR, CHART_W, ROW_H = 410, 48, 600, 800, 180, 1000, 22


def chart_rows(comparison, n: int = CHART_ROWS) -> list[dict]:
    """The rows with a known good direction and a relative change, largest change first (per-rank rows
    left out): name, change in % (clamped to ±100 for the bar), effect, and the change as the tables print it
    (percentage points for shares, so a 4.4 % → 2.8 % overlap reads −1.6 pt, not −36 %)."""
    rows = [r for s in comparison.sections if not s.title.startswith("Per rank") for r in s.rows
            if r.effect and r.rel is not None]
    rows.sort(key=lambda r: -abs(r.rel))
    return [{"name": r.name.strip(), "pct": r.rel * 100, "w": min(abs(r.rel), 1.0) * 180, "neg": r.rel < 0,
             "effect": r.effect, "label": fmt_delta(r.delta, r.unit, r.a)} for r in rows[:n]]


def chart_svg(rows: list[dict]) -> Markup:
    """The largest changes as a bar chart (inline SVG, escaped text; empty without rows)."""
    if not rows:
        return Markup("")
    h = ROW_H * len(rows) + 10
    out = [f'<svg class="chart" id="fig-diff" viewBox="0 0 {CHART_W} {h}" role="img" aria-label="relative changes">'
           f'<line x1="{ZERO}" x2="{ZERO}" y1="0" y2="{h}" stroke="#9aa3b2"/>']
    for i, x in enumerate(rows):
        name = x["name"] if len(x["name"]) <= NAME_CHARS else x["name"][:NAME_CHARS - 1] + "…"
        w = max(min(abs(x["pct"]) / 100, 1.0) * BAR, 1.0)
        colour = "#0a7a32" if x["effect"] == "better" else "#b3261e"
        out.append(f'<g transform="translate(0,{ROW_H * i + 5})"><title>{escape(x["name"])}: {x["pct"]:+.1f} %</title>'
                   f'<text x="{NAME_END}" y="14" text-anchor="end">{escape(name)}</text>'
                   f'<text x="{LABEL_END}" y="14" text-anchor="end" class="{escape(x["effect"])}">{escape(x["label"])}'
                   f'</text><rect x="{ZERO - w if x["neg"] else ZERO:.1f}" y="3" width="{w:.1f}" height="14" '
                   f'fill="{colour}"/></g>')
    return Markup("".join(out + ["</svg>"]))


def _env(templates: str = str(TEMPLATES), cache_home: str | None = None) -> jinja2.Environment:
    # Compiled code comes from the user's own cache folder, as the report's (reports/template_cache.py: 0700,
    # owner-checked, never through a link): a `diff --html` run loads it instead of compiling the template.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.bytecode_cache = TemplateCache(fingerprint(env), cache_home)
    env.filters["fmt"] = fmt  # {{ value | fmt(unit) }}
    env.filters["delta"] = lambda r: fmt_delta(r.delta, r.unit, r.a)  # {{ row | delta }}: B − A of a diff row
    return env


def render_diff_html(comparison) -> str:
    """`comparison`: a `llmdiag.diagnose.gate.diff.Comparison` (read by attribute; the report does not import the gate)."""
    return _env().get_template("diff.html.j2").render(c=comparison, chart=chart_svg(chart_rows(comparison)))
