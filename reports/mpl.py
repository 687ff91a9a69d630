"""Matplotlib helpers for figures that still use it (the MoE heatmap): imported only where such a figure is
drawn, since importing matplotlib costs about a second (reports/figures.py draws plain SVG instead).

Text in the figures is limited to numbers and fixed words; mathtext is off so a `$` could not trigger it, and
`svg.fonttype=none` keeps text as <text> (small files), which matplotlib XML-escapes.
"""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

RC = {"svg.fonttype": "none", "svg.hashsalt": "llmdiag", "text.usetex": False, "text.parse_math": False,
      "font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "font.family": "sans-serif"}


def _svg(fig: Figure, name: str) -> str:
    """SVG text for inline use: no XML prolog, element ids prefixed so several figures share one page."""
    buf = io.StringIO()
    FigureCanvasSVG(fig)
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r'( id="|url\(#|href="#)', lambda m: m.group(1) + name + "-", s)
    return s.replace("<svg ", f'<svg class="fig" id="fig-{name}" ', 1)


def _fig(w: float, h: float, left: float = 0.8, top: float = 0.4, bottom: float = 0.5, right: float = 0.15) -> Figure:
    """A figure with fixed margins in inches (constrained layout would double the drawing time)."""
    fig = Figure(figsize=(w, h))
    fig.subplots_adjust(left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h)
    return fig
