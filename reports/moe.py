"""The report's expert-parallelism section: cards, per-rank table and the rank x rank send-volume heatmap.

Reads `Analysis.moe` only (diagnose.metrics.moe computed it); prints every number through `fmt`. The heatmap
holds numbers and rank ids only: no trace string reaches the SVG or the HTML here.
"""

from __future__ import annotations

import matplotlib
from markupsafe import Markup, escape

from diagnose.model.format import fmt
from diagnose.model.moe import MoeSummary
from reports.figures import RC, _fig, _svg

MAX_ANNOTATED = 16  # ranks up to which every cell prints its value


def send_heatmap(m: MoeSummary) -> str:
    """Rows: sending rank, columns: receiving rank; colour and text: token copies per step."""
    if not m.send_matrix:
        return ""
    n = len(m.matrix_ranks)
    with matplotlib.rc_context(RC):
        side = min(9.0, 1.6 + 0.45 * n)
        fig = _fig(side + 1.2, side, left=0.9, bottom=0.8, top=0.3, right=1.3)
        ax = fig.add_subplot()
        im = ax.imshow(m.send_matrix, cmap="Blues", aspect="auto")
        ticks = list(range(n))
        labels = [str(int(r)) for r in m.matrix_ranks]
        ax.set_xticks(ticks, labels if n <= 64 else [""] * n)
        ax.set_yticks(ticks, labels if n <= 64 else [""] * n)
        ax.set_xlabel("receiving rank")
        ax.set_ylabel("sending rank")
        if n <= MAX_ANNOTATED:
            hi = max(max(row) for row in m.send_matrix) or 1
            for i, row in enumerate(m.send_matrix):
                for j, v in enumerate(row):
                    ax.text(j, i, fmt(v, "int"), ha="center", va="center", fontsize=8,
                            color="white" if v > 0.6 * hi else "black")
        fig.colorbar(im, ax=ax, label="token copies per step")
        return _svg(fig, "moe-send")


def section(m: MoeSummary | None) -> Markup:
    """The whole section as HTML, or nothing without expert parallelism."""
    if m is None:
        return Markup("")
    e = escape
    cards = [("imbalance (max/mean tokens)", fmt(m.imbalance, "x"),
              f"rank {m.hot_rank} receives most" if m.hot_rank is not None else "no split sizes in the trace"),
             ("worst layer", fmt(m.worst_layer_imbalance, "x"), "max over MoE layers and steps"),
             ("expert time imbalance", fmt(m.expert_imbalance, "x"),
              f"slowest: rank {m.slow_expert_rank}" if m.slow_expert_rank is not None else ""),
             ("dispatch + combine", fmt(m.dispatch_combine_frac, "pct"), "of the step, mean over ranks"),
             ("exposed all-to-all", fmt(m.a2a_exposed_frac, "pct"), "of the step, mean over ranks")]
    html = ['<section id="moe"><h2>Expert parallelism (MoE)</h2>',
            f'<p class="note">Token counts from the all-to-all split sizes ({e(m.source)}; roles from '
            f'{e(m.role_source)}); EP groups: {e("; ".join(str(g) for g in m.groups))}. Per step: mean over the '
            'analysed steps.</p><div class="cards">']
    html += [f'<div class="card"><div class="l">{e(a)}</div><div class="v">{e(b)}</div><div class="l">{e(c)}</div>'
             '</div>' for a, b, c in cards]
    html.append('</div><div class="tw"><table class="sort"><thead><tr><th>rank</th><th class="r">sent</th>'
                '<th class="r">received</th><th class="r">dispatch ms</th><th class="r">combine ms</th>'
                '<th class="r">experts ms</th><th class="r">all-to-all ms</th><th class="r">exposed ms</th>'
                '<th class="r">step ms</th></tr></thead><tbody>')
    for r in m.ranks:
        cells = [fmt(r.sent, "int"), fmt(r.received, "int"), fmt(r.dispatch_ms, "ms", False),
                 fmt(r.combine_ms, "ms", False), fmt(r.expert_ms, "ms", False), fmt(r.a2a_ms, "ms", False),
                 fmt(r.a2a_exposed_ms, "ms", False), fmt(r.step_ms, "ms", False)]
        html.append(f"<tr><td>{int(r.rank)}</td>" + "".join(f'<td class="r">{e(c)}</td>' for c in cells) + "</tr>")
    html.append("</tbody></table></div>")
    if m.send_matrix:
        html.append('<h3>Token copies sent per step, rank × rank (dispatch; combine sends them back)</h3>'
                    f'<div class="figwrap">{send_heatmap(m)}</div>')
    html.append("</section>")
    return Markup("".join(html))
