"""The rank heatmap's colour scale, legend, rank labels and order (reports/charts.py).

Colours are read back from the SVG and compared by their lightness, an answer computed here: a row whose
ranks differ by 2 % must not span the scale (the old per-row min..max scale painted such a gap at full
contrast), while a tenfold outlier must."""

from __future__ import annotations

import re

from llmdiag.reports import charts
from tests.gen.summaries import analysis


def _row_fills(svg: str, label: str) -> list[str]:
    return re.findall(r'fill="(#[0-9a-f]{6})"><title>' + re.escape(label) + ",", svg)


def _lightness(hex_colour: str) -> float:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return (max(r, g, b) + min(r, g, b)) / 2 / 255


def _a(n=8):
    a = analysis(n)
    for r in a.ranks:
        r.step_time_ms = 100.0 + (2.0 if r.rank == 3 else 0.0)  # 2 % apart
        r.idle_ms = 10.0 if r.rank == 5 else 1.0  # a tenfold outlier
    return a


def test_a_two_percent_gap_is_not_full_contrast_and_an_outlier_is():
    svg = charts.heatmap(_a())
    step = [_lightness(c) for c in _row_fills(svg, "step time")]
    idle = [_lightness(c) for c in _row_fills(svg, "idle")]
    full = _lightness(charts._colour(0)) - _lightness(charts._colour(charts.LEVELS - 1))
    assert step and max(step) - min(step) <= 0.15 * full, step
    assert idle and max(idle) - min(idle) >= 0.8 * full, idle


def test_legend_units_and_rank_labels():
    a = _a()
    svg = charts.heatmap(a)
    assert ">colour</text>" in svg and ">0</text>" in svg and ">max</text>" in svg
    assert svg.count('width="16" height="12"') == charts.LEVELS  # the colour bar's steps
    assert ">100.00 ms … 102.00 ms</text>" in svg  # the step row's range, in its unit
    labels = re.findall(r'text-anchor="middle">(\d+)</text>', svg)
    assert labels == [str(r) for r in range(8)]  # coordinates dp = rank: mesh order is rank order


def test_mesh_order_and_bands_from_coordinates():
    a = _a()
    for r in a.ranks:
        r.coords = {"tp": r.rank % 2, "pp": r.rank // 4, "dp": (r.rank // 2) % 2}  # no manifest mesh order
    a.manifest = None
    ranks, groups = charts.rank_order(a)
    expect = sorted(range(8), key=lambda k: (k // 4, (k // 2) % 2, k % 2))  # MESH_ORDER: pp, dp, tp
    assert [r.rank for r in ranks] == expect
    assert [g[0] for g in groups] == ["pp 0", "pp 1"]
    a.ranks[0].coords = {}  # a rank without coordinates: rank order, bands by host
    assert [r.rank for r in charts.rank_order(a)[0]] == list(range(8))


def test_many_ranks_stay_bounded_and_labelled():
    a = analysis(16)
    big = []
    for k in range(16384 // 16):
        for r in a.ranks:
            c = type(r)(**{**r.__dict__, "rank": k * 16 + r.rank, "coords": {"dp": k * 16 + r.rank}})
            big.append(c)
    a.ranks = big
    svg = charts.heatmap(a)
    labels = re.findall(r'text-anchor="middle">(\d+)</text>', svg)
    assert 5 <= len(labels) <= (1000 - 310) // charts.LABEL_GAP + 1
    assert labels[0] == "0" and "the first of each column of 32" in svg
    assert svg.count("<rect") <= 6 * charts.HEAT_MAX_COLUMNS + charts.HEAT_MAX_BANDS + charts.LEVELS + 10
