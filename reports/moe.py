"""The report's expert-parallelism section: cards, per-rank table and the rank x rank send-volume heatmap.

Reads `Analysis.moe` only (diagnose.metrics.moe computed it); prints every number through `fmt`. The heatmap
is hand-drawn SVG (like reports/figures.py) and holds numbers and rank ids only: no trace string reaches it.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from diagnose.model.format import fmt
from diagnose.model.moe_view import MOE_RANK_HEADER, accum_cards, ep_groups_text, moe_cards, moe_rank_rows
from diagnose.model.moe import MoeSummary

MAX_ANNOTATED = 16  # ranks up to which every cell prints its value
CELL, LEFT, TOP = 44, 70, 30  # px


def _blue(f: float) -> str:
    """White (0) to dark blue (1)."""
    lo, hi = (247, 251, 255), (8, 48, 107)
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(lo, hi))


def send_heatmap(m: MoeSummary) -> str:
    """Hand-drawn SVG (as reports/figures.py draws, no matplotlib): rows = sending rank, columns = receiving
    rank; colour and text = token copies per step. Only numbers and rank ids are written."""
    if not m.send_matrix:
        return ""
    n = len(m.matrix_ranks)
    cell = CELL if n <= MAX_ANNOTATED else max(4, 700 // n)
    hi = max(max(row) for row in m.send_matrix) or 1
    w, h = LEFT + n * cell + 20, TOP + n * cell + 40
    out = [f'<svg class="fig" id="fig-moe-send" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="11">']
    for i, row in enumerate(m.send_matrix):
        for j, v in enumerate(row):
            x, y = LEFT + j * cell, TOP + i * cell
            out.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{_blue(v / hi)}" '
                       f'stroke="#fff"><title>rank {int(m.matrix_ranks[i])} to {int(m.matrix_ranks[j])}: '
                       f'{fmt(v, "int")}</title></rect>')
            if n <= MAX_ANNOTATED:
                colour = "#fff" if v > 0.6 * hi else "#000"
                out.append(f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" '
                           f'fill="{colour}">{fmt(v, "int")}</text>')
    if n <= 64:
        for k, r in enumerate(m.matrix_ranks):
            out.append(f'<text x="{LEFT - 6}" y="{TOP + k * cell + cell / 2 + 4}" text-anchor="end">{int(r)}</text>')
            out.append(f'<text x="{LEFT + k * cell + cell / 2}" y="{TOP - 8}" text-anchor="middle">{int(r)}</text>')
    out.append(f'<text x="{LEFT + n * cell / 2}" y="{TOP + n * cell + 24}" text-anchor="middle">sending rank ↓, '
               'receiving rank →</text></svg>')
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
                + "".join(f'<th class="r">{e(h)}</th>' for h in MOE_RANK_HEADER[1:]) + '</tr></thead><tbody>')
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
