"""Matplotlib figures as inline SVG strings (Agg-free SVG canvas, no pyplot global state).

Text in the figures is limited to numbers and fixed words (rank numbers, "F"/"B", legend labels): raw trace
strings never reach an SVG, and mathtext is off so a `$` could not trigger it anyway. `svg.fonttype=none`
keeps text as <text> (small files), which matplotlib XML-escapes.
"""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from diagnose.model.analysis import MemoryStat, PipelineAction, RankMetrics  # noqa: E402
from diagnose.model.format import UNITS, column_unit, fmt, header_unit  # noqa: E402

RC = {"svg.fonttype": "none", "svg.hashsalt": "llmdiag", "text.usetex": False, "text.parse_math": False,
      "font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "font.family": "sans-serif"}
PARTS = [  # (attribute of RankMetrics, legend label, colour): the five parts that sum to the step time
    ("compute_only_ms", "compute only", "#4c78a8"), ("overlapped_comm_ms", "overlapped comm", "#72b7b2"),
    ("exposed_comm_ms", "exposed comm", "#e45756"), ("other_ms", "other (memcpy/memset)", "#b279a2"),
    ("idle_ms", "idle", "#d8d8d8"),
]
PP_COLOURS = {"F": "#4c78a8", "B": "#f58518", "I": "#f58518", "W": "#54a24b"}


def _svg(fig: Figure, name: str) -> str:
    """SVG text for inline use: no XML prolog, element ids prefixed so several figures share one page."""
    buf = io.StringIO()
    FigureCanvasSVG(fig)
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG lives inside HTML
    s = re.sub(r'( id="|url\(#|href="#)', lambda m: m.group(1) + name + "-", s)
    return s.replace("<svg ", f'<svg class="fig" id="fig-{name}" ', 1)


def _fig(w: float, h: float, left: float = 0.8, top: float = 0.4, bottom: float = 0.5,
         right: float = 0.15) -> Figure:
    """A figure with fixed margins in inches (constrained layout would double the drawing time)."""
    fig = Figure(figsize=(w, h))
    fig.subplots_adjust(left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h)
    return fig


def step_breakdown(rows: list[RankMetrics]) -> str:
    """Horizontal stacked bars: one per rank, the five parts of its mean step."""
    if not rows:
        return ""
    with matplotlib.rc_context(RC):
        fig = _fig(9, 0.9 + 0.22 * len(rows))
        ax = fig.add_subplot()
        y = list(range(len(rows)))
        left = [0.0] * len(rows)
        for key, label, colour in PARTS:
            vals = [float(getattr(r, key) or 0.0) for r in rows]
            ax.barh(y, vals, left=left, color=colour, label=label, height=0.75)
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.set_yticks(y, [f"rank {int(r.rank)}" for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel("mean step time (ms)")
        ax.legend(ncols=5, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=8)
        return _svg(fig, "breakdown")


def pipeline_timeline(rows: list[tuple[str, list[PipelineAction]]], t0: float, t1: float) -> str:
    """One row per pipeline rank: F/B/W blocks of one step; white gaps are the bubbles."""
    if not rows:
        return ""
    with matplotlib.rc_context(RC):
        fig = _fig(11, 0.9 + 0.42 * len(rows), left=2.3)
        ax = fig.add_subplot()
        span = max(t1 - t0, 1e-9)
        for i, (_, acts) in enumerate(rows):
            for kind in ("F", "B", "I", "W"):
                bars = [(a.start_ms - t0, a.end_ms - a.start_ms) for a in acts if a.kind == kind]
                if bars:
                    ax.broken_barh(bars, (i - 0.38, 0.76), facecolors=PP_COLOURS[kind], edgecolor="white",
                                   linewidth=0.5)
            for a in acts:
                w = a.end_ms - a.start_ms
                if w / span > 0.018:
                    label = f"{a.kind}{int(a.microbatch)}" + (f"·s{int(a.stage)}" if w / span > 0.05 else "")
                    ax.text(a.start_ms - t0 + w / 2, i, label, ha="center", va="center", fontsize=7,
                            color="white")
        ax.set_yticks(range(len(rows)), [label for label, _ in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, span)
        ax.set_xlabel("time in the step (ms)")
        handles = [Patch(color=PP_COLOURS[k], label=lbl)
                   for k, lbl in (("F", "forward"), ("B", "backward (B / I)"), ("W", "weight grad (W)"))]
        handles.append(Patch(facecolor="white", edgecolor="#999", label="idle = bubble"))
        ax.legend(handles=handles, ncols=4, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=8)
        return _svg(fig, "pipeline")


def memory_timeline(series: list[tuple[str, MemoryStat]]) -> str:
    """Allocated (solid) and reserved (dashed) memory over time per device, in the unit that fits the data.

    The axis is fitted to the curves, not to the device: a 5 MiB curve under a 23.5 GiB capacity would draw
    as a flat line at zero. Capacity is a dotted line when it lies within 1.5× the data, else a label."""
    series = [(lbl, m) for lbl, m in series if m.timeline]
    if not series:
        return ""
    top = max(max(p[1], p[2]) for _, m in series for p in m.timeline) or 1.0
    unit = column_unit([top], "gib")
    scale = UNITS[unit][0]
    with matplotlib.rc_context(RC):
        fig = _fig(10.5, 3.4, left=0.7, top=0.25, right=1.6)
        ax = fig.add_subplot()
        caps = set()
        for i, (label, m) in enumerate(series):
            colour = f"C{i % 10}"
            tl = m.timeline
            xs = [p[0] for p in tl]
            ax.plot(xs, [p[1] * scale for p in tl], color=colour, lw=1.2, label=f"{label} allocated")
            ax.plot(xs, [p[2] * scale for p in tl], color=colour, lw=0.9, ls="--")
            if m.capacity:
                caps.add(m.capacity)
        ymax = top * 1.08
        off = []
        for cap in sorted(caps):
            if cap <= top * 1.5:
                ymax = max(ymax, cap * 1.04)
                ax.axhline(cap * scale, color="#e45756", lw=1, ls=":")
                ax.text(0.995, cap * scale, f"capacity {fmt(cap, 'gib')}", transform=ax.get_yaxis_transform(),
                        ha="right", va="bottom", fontsize=8, color="#e45756")
            else:
                off.append(fmt(cap, "gib"))
        if off:
            ax.text(0.995, 1.0, f"capacity {', '.join(off)} (off scale, above)", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=8, color="#e45756")
        ax.set_ylim(0, ymax * scale)
        ax.set_xlabel("time (ms, rank trace clock)")
        ax.set_ylabel(f"{header_unit(unit)} (solid allocated, dashed reserved)")
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return _svg(fig, "memory")
