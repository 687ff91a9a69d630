"""The report's figures as plain SVG strings: step breakdown bars, the pipeline Gantt, memory over time.

Drawn by hand rather than with matplotlib: importing and drawing matplotlib cost about 1.5 s per report
(more than the analysis of a 35 MB trace); these cost milliseconds, so the report adds little to `analyze`
(benchmarks/run.py, the `render_cost` case). Text is numbers and fixed words; every string that reaches the SVG is escaped here, and enums (an action's
kind) are checked against their values: a summary read back by `render_report(read_summary(...))` is input too.
"""

from __future__ import annotations

import math

from markupsafe import escape

from llmdiag.diagnose.model.analysis import MemoryStat, PipelineAction, RankMetrics
from llmdiag.diagnose.model.fields import STEP_PARTS
from llmdiag.diagnose.model.format import UNITS, column_unit, fmt, header_unit

PP_COLOURS = {"F": "#4c78a8", "B": "#f58518", "I": "#f58518", "W": "#54a24b"}
SERIES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
W = 1000  # viewBox width of every figure


def nice_ticks(top: float, n: int = 5) -> list[float]:
    """Round ticks (1, 2 or 5 × 10^k apart) from 0 to at least `top`."""
    if not top or top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / n
    k = 10 ** math.floor(math.log10(raw))
    step = next(m * k for m in (1, 2, 5, 10) if m * k >= raw)
    return [step * i for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _tick(v: float) -> str:
    return f"{v:,.6g}"


def _open(name: str, h: float, label: str) -> list[str]:
    return [f'<svg class="fig" id="fig-{name}" viewBox="0 0 {W} {h:.0f}" role="img" aria-label="{escape(label)}" '
            'xmlns="http://www.w3.org/2000/svg" font-family="system-ui,sans-serif" font-size="12">']


def _legend(items: list[tuple[str, str, str]], y: float, x0: float) -> list[str]:
    """(label, fill, stroke) boxes in a row."""
    out, x = [], x0
    for label, fill, stroke in items:
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="11" height="11" fill="{fill}" stroke="{stroke}"/>'
                   f'<text x="{x + 15:.1f}" y="{y:.1f}">{escape(label)}</text>')
        x += 30 + 7.4 * len(label)
    return out


def _x_axis(ticks: list[float], sx, y: float, x_label: str, x_mid: float) -> list[str]:
    out = []
    for t in ticks:
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y:.1f}" y2="{y + 4:.1f}" stroke="#5b6475"/>'
                   f'<text x="{x:.1f}" y="{y + 17:.1f}" text-anchor="middle">{_tick(t)}</text>')
    out.append(f'<text x="{x_mid:.1f}" y="{y + 33:.1f}" text-anchor="middle">{escape(x_label)}</text>')
    return out


def step_breakdown(rows: list[RankMetrics]) -> str:
    """Horizontal stacked bars: one per rank, the five parts of its mean step."""
    if not rows:
        return ""
    left, right, top, bar = 90, 20, 34, 20
    h = top + bar * len(rows) + 46
    total = max(sum(float(getattr(r, p.key) or 0.0) for p in STEP_PARTS) for r in rows)
    ticks = nice_ticks(total)
    sx = lambda v: left + v / ticks[-1] * (W - left - right)
    out = _open("breakdown", h, "mean step time per rank, by part")
    out += _legend([(p.label, p.colour, p.colour) for p in STEP_PARTS], 16, left)
    for i, r in enumerate(rows):
        y, x = top + i * bar, 0.0
        out.append(f'<text x="{left - 6}" y="{y + bar * 0.68:.1f}" text-anchor="end">rank {int(r.rank)}</text>')
        for p in STEP_PARTS:
            v = float(getattr(r, p.key) or 0.0)
            if v > 0:
                out.append(f'<rect x="{sx(x):.2f}" y="{y + 2}" width="{sx(x + v) - sx(x):.2f}" height="{bar - 4}" '
                           f'fill="{p.colour}"><title>rank {int(r.rank)} {p.label}: {fmt(v, "ms")}</title></rect>')
            x += v
    axis_y = top + bar * len(rows) + 2
    out.append(f'<line x1="{left}" x2="{W - right}" y1="{axis_y}" y2="{axis_y}" stroke="#5b6475"/>')
    out += _x_axis(ticks, sx, axis_y, "mean step time (ms)", (left + W - right) / 2)
    return "".join(out + ["</svg>"])


def pipeline_timeline(rows: list[tuple[str, list[PipelineAction]]], t0: float, t1: float) -> str:
    """One row per pipeline rank: F/B/W blocks of one step; white gaps are the bubbles. The legend names only
    the kinds the step holds (no W under 1F1B)."""
    if not rows:
        return ""
    left, right, top, row_h = 230, 20, 34, 30
    h = top + row_h * len(rows) + 46
    span = max(t1 - t0, 1e-9)
    ticks = nice_ticks(span)
    sx = lambda v: left + (v - t0) / ticks[-1] * (W - left - right)
    kinds = {a.kind for _, acts in rows for a in acts} & set(PP_COLOURS)
    legend = [("forward", PP_COLOURS["F"], PP_COLOURS["F"])]
    if kinds & {"B", "I"}:
        legend.append(("backward" + (" (B / I)" if "I" in kinds else ""), PP_COLOURS["B"], PP_COLOURS["B"]))
    if "W" in kinds:
        legend.append(("weight grad (W)", PP_COLOURS["W"], PP_COLOURS["W"]))
    legend.append(("idle = bubble", "#ffffff", "#999999"))
    out = _open("pipeline", h, "pipeline actions of one step")
    out += _legend(legend, 16, left)
    for i, (label, acts) in enumerate(rows):
        y = top + i * row_h
        out.append(f'<text x="{left - 6}" y="{y + row_h * 0.62:.1f}" text-anchor="end">{escape(label)}</text>'
                   f'<rect x="{left}" y="{y + 3}" width="{W - left - right}" height="{row_h - 6}" fill="#ffffff" '
                   'stroke="#e3e6ec"/>')
        for a in acts:
            x0, x1 = sx(a.start_ms), sx(a.end_ms)
            kind = a.kind if a.kind in PP_COLOURS else "?"  # an enum: a summary read back may hold anything there
            tag = escape(f"{kind}{int(a.microbatch)}" if a.microbatch >= 0 else kind)  # -1: microbatch not told
            out.append(f'<rect x="{x0:.2f}" y="{y + 3}" width="{max(x1 - x0, 0.5):.2f}" height="{row_h - 6}" '
                       f'fill="{PP_COLOURS.get(kind, "#999")}" stroke="#fff" stroke-width="0.6"><title>{tag} stage '
                       f'{int(a.stage)}: {fmt(a.start_ms - t0, "ms")} – {fmt(a.end_ms - t0, "ms")}</title></rect>')
            if x1 - x0 > 22:
                text = tag + (f"·s{int(a.stage)}" if x1 - x0 > 48 else "")
                out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y + row_h * 0.62:.1f}" text-anchor="middle" '
                           f'fill="#fff" font-size="11">{text}</text>')
    axis_y = top + row_h * len(rows) + 2
    out += _x_axis([t for t in ticks], lambda v: sx(v + t0), axis_y, "time in the step (ms)", (left + W - right) / 2)
    return "".join(out + ["</svg>"])


def memory_timeline(series: list[tuple[str, MemoryStat]]) -> str:
    """Allocated (solid) and reserved (dashed) memory over time per device, in the unit that fits the data.

    The axis is fitted to the curves, not to the device: a 5 MiB curve under a 23.5 GiB capacity would draw
    as a flat line at zero. Capacity is a dotted line when it lies within 1.5× the data, else a label."""
    series = [(lbl, m) for lbl, m in series if m.timeline]
    if not series:
        return ""
    top_b = max(max(p[1], p[2]) for _, m in series for p in m.timeline) or 1.0
    unit = column_unit([top_b], "gib")
    scale = UNITS[unit][0]
    caps = sorted({m.capacity for _, m in series if m.capacity})
    shown_caps = [c for c in caps if c <= top_b * 1.5]
    yticks = nice_ticks(max([top_b * 1.04] + [c * 1.02 for c in shown_caps]) * scale, 4)
    xs_all = [p[0] for _, m in series for p in m.timeline]
    x_lo, x_hi = min(xs_all), max(xs_all)
    xticks = nice_ticks(x_hi - x_lo or 1.0)
    left, right, top, bottom = 80, 200, 24, 46
    h = 320
    plot_h = h - top - bottom
    sx = lambda v: left + (v - x_lo) / xticks[-1] * (W - left - right)
    sy = lambda b: top + plot_h - b * scale / yticks[-1] * plot_h
    out = _open("memory", h, "memory over time per device")
    for t in yticks:
        y = top + plot_h - t / yticks[-1] * plot_h
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e6ec"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_tick(t)}</text>')
    out.append(f'<text x="16" y="{top + plot_h / 2:.1f}" text-anchor="middle" transform="rotate(-90 16 '
               f'{top + plot_h / 2:.1f})">{header_unit(unit)} (solid allocated'
               f'{", dashed reserved" if any(m.peak_reserved is not None for _, m in series) else ""})</text>')
    for i, (label, m) in enumerate(series):
        colour = SERIES[i % len(SERIES)]
        cols = ((1, ""), (2, ' stroke-dasharray="5 3"')) if m.peak_reserved is not None else ((1, ""),)
        for col, dash in cols:  # no reserved line where nothing reserves (CPU): n/a, not a line at zero
            pts = " ".join(f"{sx(p[0]):.1f},{sy(p[col]):.1f}" for p in m.timeline)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.4"{dash}/>')
        out.append(f'<line x1="{W - right + 10}" x2="{W - right + 30}" y1="{top + 8 + 18 * i}" y2="{top + 8 + 18 * i}" '
                   f'stroke="{colour}" stroke-width="2"/><text x="{W - right + 36}" y="{top + 12 + 18 * i}">'
                   f'{escape(label)}</text>')
    for c in shown_caps:
        y = sy(c)
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e45756" '
                   f'stroke-dasharray="2 3"/><text x="{W - right - 4}" y="{y - 4:.1f}" text-anchor="end" '
                   f'fill="#e45756">capacity {fmt(c, "gib")}</text>')
    off = [fmt(c, "gib") for c in caps if c not in shown_caps]
    if off:
        out.append(f'<text x="{W - right - 4}" y="{top - 8}" text-anchor="end" fill="#e45756">capacity '
                   f'{", ".join(off)} (off scale, above)</text>')
    axis_y = top + plot_h
    out.append(f'<line x1="{left}" x2="{W - right}" y1="{axis_y}" y2="{axis_y}" stroke="#5b6475"/>')
    out += _x_axis(xticks, lambda v: sx(v + x_lo), axis_y, "time (ms from the first sample, rank trace clock)",
                   (left + W - right) / 2)
    return "".join(out + ["</svg>"])

