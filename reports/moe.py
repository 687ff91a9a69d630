"""The report's expert-parallelism section: cards, per-rank table and the rank x rank send-volume heatmap.

Reads `Analysis.moe` only (diagnose.metrics.moe computed it); prints every number through `fmt`. The heatmap
is hand-drawn SVG at its natural size (like reports/figures.py) and holds numbers and rank ids only: no trace
string reaches it.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.moe_view import MOE_RANK_HEADER, accum_cards, ep_groups_text, moe_cards, moe_rank_rows
from llmdiag.diagnose.model.moe import MoeSummary

MAX_ANNOTATED = 16  # ranks up to which every cell prints its value
PLOT_MAX = 560  # px: the matrix is at most this wide and tall, whatever the number of ranks
LEFT, TOP, LEGEND_W = 80, 44, 130  # px: row labels and the axis name; title and column labels; the colour bar
LABEL_GAP = 26  # px between two printed rank labels: past that, every k-th rank is labelled
LEGEND_STEPS = 10


def _blue(f: float) -> str:
    """White (0) to dark blue (1)."""
    lo, hi = (247, 251, 255), (8, 48, 107)
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(lo, hi))


def send_heatmap(m: MoeSummary) -> str:
    """Hand-drawn SVG at its natural size (it shrinks on a narrow page, never stretches): rows = sending rank,
    columns = receiving rank; colour from 0 to the largest cell (the colour bar says so, with its unit), and
    up to MAX_ANNOTATED ranks each cell prints its value. Rank labels every k-th rank past LABEL_GAP px apart.
    Only numbers and rank ids are written."""
    if not m.send_matrix:
        return ""
    n = len(m.matrix_ranks)
    hi = max(max(row) for row in m.send_matrix) or 1
    texts = [[fmt(v, "int") for v in row] for row in m.send_matrix]
    widest = max(len(t) for row in texts for t in row)
    cell = max(44, 7 * widest + 12) if n <= MAX_ANNOTATED else max(2.0, PLOT_MAX / n)
    plot = n * cell
    w, h = LEFT + plot + LEGEND_W, TOP + max(plot, 120) + 12
    out = [f'<svg class="moeheat" id="fig-moe-send" viewBox="0 0 {w:.0f} {h:.0f}" width="{w:.0f}" height="{h:.0f}" '
           'role="img" aria-label="token copies per step, rank by rank" xmlns="http://www.w3.org/2000/svg" '
           'font-family="system-ui,sans-serif" font-size="11">']
    stroke = ' stroke="#fff"' if cell >= 8 else ""  # white gaps between cells only where cells are wide
    for i, row in enumerate(m.send_matrix):
        for j, v in enumerate(row):
            x, y = LEFT + j * cell, TOP + i * cell
            out.append(f'<rect x="{x:.2f}" y="{y:.2f}" width="{cell:.2f}" height="{cell:.2f}" fill="{_blue(v / hi)}"'
                       f'{stroke}><title>rank {int(m.matrix_ranks[i])} to '
                       f'{int(m.matrix_ranks[j])}: {texts[i][j]}</title></rect>')
            if n <= MAX_ANNOTATED:
                colour = "#fff" if v > 0.6 * hi else "#000"
                out.append(f'<text x="{x + cell / 2:.1f}" y="{y + cell / 2 + 4:.1f}" text-anchor="middle" '
                           f'fill="{colour}">{texts[i][j]}</text>')
    every = max(1, -(-LABEL_GAP // int(max(cell, 1))))  # label every k-th rank: at least LABEL_GAP px apart
    for k in range(0, n, every):
        r = int(m.matrix_ranks[k])
        out.append(f'<text x="{LEFT - 6}" y="{TOP + k * cell + min(cell, 14) / 2 + 4:.1f}" text-anchor="end">{r}</text>'
                   f'<text x="{LEFT + k * cell + min(cell, 20) / 2:.1f}" y="{TOP - 6}" text-anchor="middle">{r}</text>')
    out.append(f'<text x="{LEFT + plot / 2:.1f}" y="14" text-anchor="middle">receiving rank</text>'
               f'<text x="14" y="{TOP + plot / 2:.1f}" text-anchor="middle" transform="rotate(-90 14 '
               f'{TOP + plot / 2:.1f})">sending rank</text>')
    lx, bar_h = LEFT + plot + 16, max(plot, 120) - 10  # the colour bar: 0 at the bottom, the largest cell on top
    out.append(f'<text x="{lx}" y="{TOP - 22}">token copies</text><text x="{lx}" y="{TOP - 8}">per step</text>')
    for k in range(LEGEND_STEPS):
        y = TOP + 4 + bar_h * (1 - (k + 1) / LEGEND_STEPS)
        out.append(f'<rect x="{lx}" y="{y:.1f}" width="14" height="{bar_h / LEGEND_STEPS + 0.5:.1f}" '
                   f'fill="{_blue((k + 0.5) / LEGEND_STEPS)}"/>')
    for f in (0.0, 0.5, 1.0):
        y = TOP + 4 + bar_h * (1 - f)
        out.append(f'<line x1="{lx + 14}" x2="{lx + 18}" y1="{y:.1f}" y2="{y:.1f}" stroke="#5b6475"/>'
                   f'<text x="{lx + 21}" y="{y + 4:.1f}">{fmt(f * hi, "int")}</text>')
    out.append("</svg>")
    return "".join(out)


def section(m: MoeSummary | None) -> Markup:
    """The whole section as HTML, or nothing without expert parallelism."""
    if m is None:
        return Markup("")
    e = escape
    cards = moe_cards(m)
    html = ['<section id="moe"><h2>Expert parallelism (MoE)</h2>',
            f'<p class="note">Token counts from the all-to-all split sizes ({e(m.source)}; roles from '
            f'{e(m.role_source)}); {e(ep_groups_text(m))}. Per step: mean over the '
            'analysed steps.</p><div class="cards">']
    html += [f'<div class="card"><div class="l">{e(a)}</div><div class="v">{e(b)}</div><div class="l">{e(c)}</div>'
             '</div>' for a, b, c in cards]
    html.append('</div><div class="tw"><table class="sort"><thead><tr><th>rank</th>'
                + "".join(f'<th class="r">{e(h)}{" tokens" if i < 2 else ""}</th>'  # sent, received: tokens
                          for i, h in enumerate(MOE_RANK_HEADER[1:])) + '</tr></thead><tbody>')
    for row in moe_rank_rows(m):
        html.append(f"<tr><td>{e(row[0])}</td>" + "".join(f'<td class="r">{e(c)}</td>' for c in row[1:]) + "</tr>")
    html.append("</tbody></table></div>")
    if m.send_matrix:
        html.append('<h3>Token copies sent per step, rank × rank (dispatch; combine sends them back)</h3>'
                    f'<div class="figwrap">{send_heatmap(m)}</div>')
    html.append("</section>")
    return Markup("".join(html))


def accum_section(acc) -> Markup:
    """Gradient accumulation: microsteps and data-parallel traffic per optimizer step."""
    if acc is None:
        return Markup("")
    html = ['<section id="accum"><h2>Gradient accumulation</h2><div class="cards">']
    html += [f'<div class="card"><div class="l">{escape(a)}</div><div class="v">{escape(b)}</div>'
             f'<div class="l">{escape(c)}</div></div>' for a, b, c in accum_cards(acc)]
    html.append("</div></section>")
    return Markup("".join(html))
