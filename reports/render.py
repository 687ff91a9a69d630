"""Render a typed `Analysis` as one self-contained HTML file.

The report reads the analysis as given: its findings in their order (the rules ran once, in `analyze`;
a summary read back carries them), its numbers through the shared views and `fmt`, as the terminal does.

Jinja2 with autoescape on renders every trace-derived string as text; figures are inline SVG built from
numbers only; a Content-Security-Policy allows no script but the small table-sorting one (by hash), so an
escaping slip still could not run anything. No CDN, no network, nothing outside the file.
"""

from __future__ import annotations

import base64
import hashlib
import os

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from llmdiag.diagnose.model.analysis import SEVERITIES, Analysis
from llmdiag.diagnose.model.files import write_atomic
from llmdiag.diagnose.model.format import fmt
from llmdiag.reports import charts, evidence, figures
from llmdiag.reports.context import build
from llmdiag.reports.glossary import GLOSSARY
from llmdiag.reports.template_cache import TemplateCache, fingerprint

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
# Click a header to sort a table (numbers by value, n/a last). Optional: the report reads fine without it.
SORT_JS = (
    "document.querySelectorAll('table.sort th').forEach(function(th){th.addEventListener('click',function(){"
    "var t=th.closest('table'),b=t.tBodies[0],i=th.cellIndex,d=th.dataset.dir==='1'?-1:1;"
    "t.querySelectorAll('th').forEach(function(h){delete h.dataset.dir;});th.dataset.dir=d;"
    "var k=function(r){var s=r.cells[i]?r.cells[i].textContent.trim():'',f=parseFloat(s.replace(/[,%]/g,''));"
    "return isNaN(f)?[1,s]:[0,f];};Array.prototype.slice.call(b.rows).sort(function(x,y){var a=k(x),c=k(y);"
    "return a[0]-c[0]||(a[1]>c[1]?d:a[1]<c[1]?-d:0);}).forEach(function(r){b.appendChild(r);});});});"
    "document.documentElement.setAttribute('data-sortable','on');"
)


def _code(text) -> Markup:
    """Escape `text` and turn `backticked` parts into <code> (actions quote settings that way)."""
    parts = str(text or "").split("`")
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


METRIC_ANCHORS = [  # substring of a finding's evidence.metric -> glossary entry
    ("imbalance", "imbalance"), ("pipeline", "bubble"), ("busbw", "busbw"), ("comm_by_kind", "comm_overlap"),
    ("memory", "memory"), ("hints", "hints"), ("skew", "straggler"), ("step_time", "step_time"),
]


def _anchor(metric) -> str:
    return next((g for key, g in METRIC_ANCHORS if key in str(metric or "")), "severity")


def _env(templates: str = TEMPLATES, cache_home: str | None = None) -> Environment:
    # The compiled templates are kept in the user's own cache folder (reports/template_cache.py: created 0700,
    # owner-checked, never through a link), never in jinja2's default `$TMPDIR/_jinja2-cache-<uid>`, a name
    # anyone can plant. A run loads them (<1 ms) instead of compiling them (0.3-0.7 s); an edited template
    # misses and compiles once more.
    env = Environment(loader=FileSystemLoader(templates), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.bytecode_cache = TemplateCache(fingerprint(env), cache_home)
    env.filters["fmt"] = fmt
    env.filters["code"] = _code
    env.filters["anchor"] = _anchor
    return env


_ENV = _env()
REPORT_TEMPLATES = ("report.html.j2", "idle.html.j2", "critical_path.html.j2", "kernel_views.html.j2", "whatif.html.j2")


def warm() -> None:
    """Load the report's compiled templates now (from the cache, or compiled once), so `render_html` finds them
    loaded: the command line does it while the traces are analysed in a forked child (engine/fork.py)."""
    for name in REPORT_TEMPLATES:
        _ENV.get_template(name)


def _moe(a: Analysis) -> Markup:
    """The MoE section, imported only for a run with expert parallelism."""
    if a.moe is None:
        return Markup("")
    from llmdiag.reports import moe as moe_section

    return moe_section.section(a.moe)


def _accum(a: Analysis) -> Markup:
    if a.accum is None:
        return Markup("")
    from llmdiag.reports import moe as moe_section

    return moe_section.accum_section(a.accum)


def render_html(a: Analysis) -> str:
    """The report as a string. Findings are shown as given (`a.findings`, already in the one order); the
    headline's top recommendations are the first three."""
    ctx = build(a)
    pipe = ctx["pipe"]
    ev_links, back = evidence.links(ctx)
    figs = {
        "heatmap": Markup(charts.heatmap(a)) if len(a.ranks) > 1 else Markup(""),
        "steps": Markup(charts.per_step(a)),
        "breakdown": Markup(figures.step_breakdown([r for _, r, _ in ctx["shown"]])),
        "pipeline": Markup(figures.pipeline_timeline(pipe["rows"], pipe["t0"], pipe["t1"]) if pipe else ""),
        "memory": Markup(figures.memory_timeline(ctx["memory_series"])),
        "moe": _moe(a),
        "accum": _accum(a),
    }
    csp = "sha256-" + base64.b64encode(hashlib.sha256(SORT_JS.encode()).digest()).decode()
    return _ENV.get_template("report.html.j2").render(
        **ctx, figs=figs, ev_links=ev_links, back=back, glossary=GLOSSARY, findings=a.findings, top=list(enumerate(a.findings[:3])),
        script=Markup(SORT_JS), csp=csp, severities=SEVERITIES)


def render_report(a: Analysis, path: str) -> str:
    """Write the report to `path` through the one output writer (model/files.py `write_atomic`: regular files
    only, never an input, temp file beside it, fsync, rename) and return the path."""
    return write_report(render_html(a), path)


def write_report(html: str, path: str) -> str:
    """`render_html`'s page written as `render_report` writes it; the path."""
    write_atomic(path, html)
    return path
