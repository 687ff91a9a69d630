"""Many-rank figures drawn as plain SVG (no matplotlib: they cost microseconds, and scale to 1,024 ranks).

- `heatmap`: rank × metric (step, compute only, exposed comm, idle, bubble, memory), ranks in mesh order
  (else rank order) and grouped by the outermost mesh coordinate (else host), each metric coloured from 0 to its
  largest value with a colour bar and rank labels. Runs of equal colour are merged into one rectangle, so 1,024
  similar ranks cost a few hundred elements, not 6,000.
- `per_step`: per step, the five parts of the step (mean over ranks, stacked) and the spread of the step
  time over ranks (min..max whisker).

Every string that reaches the SVG (host names come from traces) is escaped; numbers are formatted by `fmt`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from operator import attrgetter

from markupsafe import escape

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Analysis, RankMetrics
from llmdiag.diagnose.model.format import column_unit, fmt
from llmdiag.diagnose.model.fields import FIELDS, STEP_PARTS
from llmdiag.diagnose.model.views import hosts as rank_hosts
from llmdiag.diagnose.model.lazy_re import lazy_compile

def _heat_row(key: str):
    """(label, unit, value of a rank or None) of a registry field (model/fields.py); worse is higher on each."""
    f = FIELDS[key]
    get = (lambda r, x: x["bubble"].get(r.rank)) if key == "bubble" else (lambda r, x: getattr(r, key))
    return f.label, f.unit, get


HEAT_ROWS = [_heat_row(k) for k in ("step_time_ms", "compute_only_ms", "exposed_comm_ms", "idle_ms", "bubble",
                                    "memory_peak")]
LEVELS = 12  # colour steps per row: enough to see an outlier, few enough to merge runs


def _colour(level: int) -> str:
    """Near white (0) to dark red (the row's largest value), LEVELS steps."""
    t = level / (LEVELS - 1)
    r, g, b = 255 - int(t * 120), 250 - int(t * 220), 240 - int(t * 215)
    return f"#{r:02x}{g:02x}{b:02x}"


SAFE = lazy_compile(r"[A-Za-z0-9._:-]{1,48}")
MESH_ORDER = ("pp", "dp", "fsdp", "cp", "tp")  # outermost first, as torch's device meshes usually nest them


def _host_label(host: str, i: int) -> str:
    """A host name for a figure: shown when it is a plain name, else 'host N' (figures carry no raw trace
    strings; the tables show the real name, escaped)."""
    return host if SAFE.fullmatch(host) else f"host {i}"


def mesh_dims(a: Analysis) -> list[str]:
    """The mesh dimensions every rank has a coordinate in and that take more than one value, outermost first:
    the manifest's mesh order when it names one, else MESH_ORDER (then any other dimension, by name); []
    without coordinates."""
    coords = [r.coords if isinstance(r.coords, dict) else {} for r in a.ranks]
    known = set.intersection(*(set(k for k, v in c.items() if isinstance(v, int)) for c in coords)) if coords else set()
    named = [str(d) for d in (a.manifest.mesh_dim_names if a.manifest else []) or []]
    known = {d for d in known if len({c[d] for c in coords}) > 1}  # a dimension of size 1 orders nothing
    order = [d for d in named if d in known] + [d for d in MESH_ORDER if d in known and d not in named]
    return order + sorted(known - set(order))


def rank_order(a: Analysis) -> tuple[list[RankMetrics], list[tuple[str, int, int]]]:
    """Ranks in mesh order (coordinates outermost first, then rank) where every rank has coordinates, else by
    rank; groups as (label, first, last index): runs of the outermost mesh coordinate that groups at least two
    ranks, else runs of one host."""
    dims = mesh_dims(a)
    ranks = sorted(a.ranks, key=lambda r: (*(r.coords[d] for d in dims), r.rank))
    n = len(ranks)
    band = next((d for d in dims if 2 <= len({r.coords[d] for r in ranks}) <= n // 2), None)
    if band is not None:
        label_of = {r.rank: f"{band} {int(r.coords[band])}" for r in ranks}
    else:
        raw = rank_hosts(a)
        names = {h: _host_label(h, i) for i, h in enumerate(sorted(set(raw.values())))}
        label_of = {r.rank: names[raw[r.rank]] for r in ranks}
    groups: list[list] = []
    for i, r in enumerate(ranks):
        label = label_of[r.rank]
        if groups and groups[-1][0] == label:
            groups[-1][2] = i
        else:
            groups.append([label, i, i])
    return ranks, [tuple(g) for g in groups]


HEAT_MAX_COLUMNS = 512  # more ranks than this are binned: a column narrower than ~1.3 px shows no outlier
HEAT_MAX_BANDS = 256  # group bands drawn above the cells; past this the caption counts them
LABEL_GAP = 48  # viewBox units between two rank labels under the cells (five digits at 12 px, and a gap)


def _bins(n: int) -> list[tuple[int, int]]:
    """(first, last) index of each column: one rank per column up to HEAT_MAX_COLUMNS, else equal runs."""
    if n <= HEAT_MAX_COLUMNS:
        return [(i, i) for i in range(n)]
    size = math.ceil(n / HEAT_MAX_COLUMNS)
    return [(i, min(n, i + size) - 1) for i in range(0, n, size)]


def _level(v: float, hi: float) -> int:
    """A value's colour step on its row's scale from 0 to the row's largest value: ranks 2 % apart get the
    same or the next step, never the two ends of the scale."""
    return 0 if hi <= 0 else max(0, min(LEVELS - 1, round(v / hi * (LEVELS - 1))))


def heatmap(a: Analysis) -> str:
    """The rank × metric heatmap as an SVG string (empty without ranks). Each row is coloured from 0 to its
    largest value (a colour bar under the cells says so; the row's range is printed at its right), so equal
    shades mean near-equal values. Columns are in mesh order with rank labels under them. Above
    HEAT_MAX_COLUMNS ranks, runs of consecutive ranks (in the figure's order) share a column coloured by their
    worst (highest) value, and the caption and each tooltip say so: an outlier among 16,384 ranks still shows."""
    ranks, groups = rank_order(a)
    if not ranks:
        return ""
    dims = mesh_dims(a)
    extra = {"bubble": {b.rank: b.measured for b in (a.pipeline.stage_bubbles if a.pipeline else [])}}
    bins = _bins(len(ranks))
    rows = []
    for label, unit, get in HEAT_ROWS:
        vals = [get(r, extra) for r in ranks]
        if all(v is None for v in vals):
            continue
        cells = []
        for i0, i1 in bins:
            xs = [(v, ranks[i].rank) for i, v in enumerate(vals[i0:i1 + 1], i0) if v is not None]
            cells.append(None if not xs else (max(xs), statistics.fmean([v for v, _ in xs]), len(xs), min(xs)[0]))
        rows.append((label, unit, cells))
    n, nb = len(ranks), len(bins)
    per = bins[0][1] - bins[0][0] + 1
    left, right, cell_h, width = 170, 190, 22, 1000  # left: the longest row label, "memory peak (allocated)"
    plot_w = width - left - right
    cw = plot_w / nb
    top = 34 if nb == n else 48  # a binned map has a second caption line
    bottom = top + cell_h * len(rows)
    h = bottom + 80
    out = [f'<svg class="fig heat" id="fig-heatmap" viewBox="0 0 {width} {h}" role="img" '
           f'aria-label="rank by metric heatmap" xmlns="http://www.w3.org/2000/svg">']
    col = lambda i: i // per  # the column a rank index falls in
    for g, (label, i0, i1) in enumerate(groups if len(groups) <= HEAT_MAX_BANDS else []):
        x0, x1 = left + col(i0) * cw, left + (col(i1) + 1) * cw
        out.append(f'<rect x="{x0:.2f}" y="{top - 16}" width="{x1 - x0:.2f}" height="12" '
                   f'fill="{"#dde3ee" if g % 2 == 0 else "#c5cfdf"}"><title>{escape(label)}: ranks '
                   f'{ranks[i0].rank}…{ranks[i1].rank}</title></rect>')
        fits = int((x1 - x0 - 6) / 7.5)  # characters that fit in the band at 12 px
        if fits >= 4:
            text = label if len(label) <= fits else label[:fits - 1] + "…"
            out.append(f'<text x="{x0 + 3:.2f}" y="{top - 6}" class="hl">{escape(text)}</text>')
        if g and len(groups) <= 64:  # a thin gap between groups; past 64 the band above says it
            out.append(f'<line x1="{x0:.2f}" x2="{x0:.2f}" y1="{top}" y2="{bottom}" stroke="#fff" '
                       'stroke-width="1.5"/>')
    order = f"mesh order ({', '.join(dims)})" if dims else "rank order"
    kind = groups[0][0].split(" ")[0] if groups and dims and groups[0][0].split(" ")[0] in dims else "host"
    what = f"{n} ranks in {order}; {len(groups)} group{'s' if len(groups) != 1 else ''} by {kind}"
    how = "(the band above; hover a cell or band for its ranks)" if len(groups) <= HEAT_MAX_BANDS else "(no bands)"
    out.append(f'<text x="4" y="{top - 22}" class="hl">{escape(what)} {escape(how)}</text>')
    if nb < n:
        out.append(f'<text x="4" y="{top - 36}" class="hl">Binned: each column is {per} consecutive ranks in this '
                   'order, coloured by their worst (highest) value; hover for its ranks, max and mean</text>')
    for j, (label, unit, cells) in enumerate(rows):
        y = top + j * cell_h
        defined = [c[0][0] for c in cells if c is not None]
        hi = max(defined)  # the colour scale: 0 to the largest column (worst) value
        low = min(c[3] for c in cells if c is not None)  # the label: every rank's range, as the tables print it
        u = column_unit([hi], unit) if unit == "gib" else unit
        out.append(f'<text x="{left - 6}" y="{y + cell_h * 0.68:.1f}" text-anchor="end">{label}</text>')
        rng = f"all {fmt(low, u)}" if fmt(low, u) == fmt(hi, u) else f"{fmt(low, u)} … {fmt(hi, u)}"
        out.append(f'<text x="{width - right + 6}" y="{y + cell_h * 0.68:.1f}" class="hl">{rng}</text>')
        levels = [None if c is None else _level(c[0][0], hi) for c in cells]
        i = 0
        while i < nb:  # merge runs of one colour
            k = i
            while k + 1 < nb and levels[k + 1] == levels[i]:
                k += 1
            fill = "#f2f2f2" if levels[i] is None else _colour(levels[i])
            r0, r1 = ranks[bins[i][0]].rank, ranks[bins[k][1]].rank
            c = cells[i]
            if nb < n and c is not None:
                b0, b1 = ranks[bins[i][0]].rank, ranks[bins[i][1]].rank
                tip = (f"ranks {b0}…{b1} (in this order): max {fmt(c[0][0], u)} (rank {c[0][1]}), mean "
                       f"{fmt(c[1], u)}" + (f"; through rank {r1}: similar" if k > i else ""))
            else:
                tip = (f"rank {r0}: {fmt(c[0][0] if c else None, u)}" if k == i else
                       f"ranks {r0}…{r1} (in this order): {fmt(c[0][0] if c else None, u)}"
                       + ("" if levels[i] is None else " and similar"))
            out.append(f'<rect x="{left + i * cw:.2f}" y="{y + 1}" width="{(k - i + 1) * cw:.2f}" height="{cell_h - 2}" '
                       f'fill="{fill}"><title>{label}, {tip}</title></rect>')
            i = k + 1
    every = max(1, math.ceil(LABEL_GAP / cw))  # rank labels under the cells, at least LABEL_GAP apart
    for i in range(0, nb, every):
        x = left + (i + 0.5) * cw
        out.append(f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{bottom}" y2="{bottom + 4}" stroke="#5b6475"/>'
                   f'<text x="{x:.2f}" y="{bottom + 16}" text-anchor="middle">{ranks[bins[i][0]].rank}</text>')
    axis = "rank" if nb == n else f"rank (the first of each column of {per})"
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{bottom + 33}" text-anchor="middle" class="hl">{axis}</text>')
    ly = bottom + 44  # the colour bar: one step per level, from 0 to the row's largest value
    out.append(f'<text x="{left - 6}" y="{ly + 10}" text-anchor="end" class="hl">colour</text>')
    for k in range(LEVELS):
        out.append(f'<rect x="{left + k * 16}" y="{ly}" width="16" height="12" fill="{_colour(k)}"/>')
    out.append(f'<text x="{left}" y="{ly + 26}" text-anchor="middle" class="hl">0</text>'
               f'<text x="{left + LEVELS * 16}" y="{ly + 26}" text-anchor="middle" class="hl">max</text>'
               f'<text x="{left + LEVELS * 16 + 30}" y="{ly + 10}" class="hl">each row from 0 to its largest value '
               '(its range at the right): ranks a few % apart look alike</text>')
    out.append("</svg>")
    return "".join(out)


def _nice(x: float) -> float:
    """The round step (1, 2 or 5 × 10^k) at or above x."""
    if x <= 0:
        return 1.0
    k = 10 ** math.floor(math.log10(x))
    return next(m * k for m in (1, 2, 5, 10) if m * k >= x)


def step_series(a: Analysis) -> list[dict]:
    """Per step number: the five parts as the mean over the ranks that have the step, and the step time's
    min / mean / max over those ranks."""
    by: dict[int, list] = defaultdict(list)
    for r in a.ranks:
        for st in r.steps:
            by[st.step].append(st)
    out = []
    for step in sorted(by):
        xs = by[step]
        times = [s.time_ms for s in xs]
        out.append({"step": step, "ranks": len(xs), "min": min(times), "max": max(times),
                    "mean": statistics.fmean(times),
                    "parts": [(p.label, p.colour, statistics.fmean(list(map(attrgetter(p.key), xs))))
                              for p in STEP_PARTS]})
    return out


def per_step(a: Analysis) -> str:
    """Stacked mean parts per step with a min..max whisker of the step time over ranks (SVG)."""
    series = step_series(a)
    if len(series) < 2:
        return ""
    width, h, left, bottom, top = 1000, 260, 60, 36, 44
    plot_w, plot_h = width - left - 20, h - top - bottom
    top_v = max(s["max"] for s in series)
    tick = _nice(top_v / 4)
    ymax = math.ceil(top_v * 1.02 / tick) * tick
    bw = plot_w / len(series)
    bar = min(bw * 0.7, 60)
    sy = lambda v: top + plot_h - v / ymax * plot_h
    out = [f'<svg class="fig" id="fig-steps" viewBox="0 0 {width} {h}" role="img" aria-label="step time per step" '
           'xmlns="http://www.w3.org/2000/svg">']
    for k in range(int(round(ymax / tick)) + 1):  # y grid and labels at round values
        v = tick * k
        out.append(f'<line x1="{left}" x2="{width - 20}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#e3e6ec"/>'
                   f'<text x="{left - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    out.append(f'<text x="{left}" y="14" class="hl">ms per step: parts stacked (mean over ranks), whisker = '
               'slowest and fastest rank</text>')
    label_w = 7.5 * max(len(str(s["step"])) for s in series) + 10  # a step number at 12 px and a gap
    label_every = max(1, math.ceil(label_w / bw))
    for i, s in enumerate(series):
        x = left + i * bw
        y = top + plot_h
        tip = f"step {s['step']}: mean {fmt(s['mean'], 'ms')}, ranks {fmt(s['min'], 'ms')} … {fmt(s['max'], 'ms')}"
        out.append(f'<g id="step-bar-{s["step"]}"><title>{tip}</title>')
        for label, colour, v in s["parts"]:
            hh = v / ymax * plot_h
            y -= hh
            out.append(f'<rect x="{x + (bw - bar) / 2:.2f}" y="{y:.2f}" width="{bar:.2f}" height="{max(hh, 0):.2f}" '
                       f'fill="{colour}"/>')
        cx = x + bw / 2
        out.append(f'<line x1="{cx:.2f}" x2="{cx:.2f}" y1="{sy(s["max"]):.2f}" y2="{sy(s["min"]):.2f}" '
                   'stroke="#1d2330" stroke-width="1.2"/></g>')
        if i % label_every == 0:
            out.append(f'<text x="{cx:.2f}" y="{top + plot_h + 14}" text-anchor="middle">{s["step"]}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{h - 4}" text-anchor="middle">step</text>')
    x = left
    for label, colour, _ in series[0]["parts"]:
        out.append(f'<rect x="{x}" y="22" width="10" height="10" fill="{colour}"/><text x="{x + 14}" y="31">{label}</text>')
        x += max(130, 24 + 7.4 * len(label))
    out.append("</svg>")
    return "".join(out)
