"""Outputs at 16,384 ranks stay the size a person reads: no table, list or figure grows with the rank count.

A small generated job is analysed once; its ranks are then repeated to 4,096 (each with its own step time,
one clear outlier) and every output is rendered from that Analysis: past the caps (32 rows, 512 heatmap
columns) nothing may grow. No 4k traces are read: the end-to-end run over 2,048 generated traces is
tests/e2e/test_scale_e2e.py, and benchmarks/ladder.py measures 16,384.
"""

from __future__ import annotations

import copy
import dataclasses
import re

import orjson
import pytest

from benchmarks import generate
from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import fmt, ranges
from llmdiag.diagnose.model.pack import MEMORY_TIMELINES, PACK_ABOVE_RANKS, pack, unpack
from llmdiag.diagnose.model.summary import read_summary, summary_bytes
from llmdiag.diagnose.rules import findings
from llmdiag.reports import charts
from llmdiag.reports.render import render_html

N = 4096
OUT = 3210  # the outlier rank


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Analysis:
    d = tmp_path_factory.mktemp("scale") / "r8"
    generate.write_set(str(d), ranks=8, mb=0.3, steps=3, jobs=1)
    base = analyze_path(str(d), rules=False)
    ranks = []
    for i in range(N):
        r = base.ranks[i % len(base.ranks)]
        # a spread, so no two neighbours merge; lists shared with the base rank (read only here)
        ranks.append(dataclasses.replace(r, rank=i, step_time_ms=r.step_time_ms * (1 + (i % 97) / 1000)))
    ranks[OUT].step_time_ms *= 3  # the outlier every output must still show
    a = copy.copy(base)
    a.ranks, a.world_size = ranks, N
    a.findings = findings(a)
    return a


def test_terminal_is_bounded_and_names_the_outlier(big):
    text = render(big, width=160, colour=False)
    lines = text.splitlines()
    assert len(lines) < 250
    rank_rows = [ln for ln in lines if re.match(r"^\d+\s", ln)]  # table rows that start with a rank number
    assert len(rank_rows) <= 80
    assert f"{N - 16} more ranks in the JSON summary" in text  # the cap says how many are hidden
    assert str(OUT) in text  # the slowest rank, in the per-rank table and the distribution
    assert re.search(r"^step time .*p90|metric .* p90", text, re.M) or " p90 " in text


def test_report_is_bounded_and_the_heatmap_binned(big):
    html = render_html(big)
    assert html.count("<tr") < 400
    svg = charts.heatmap(big)
    assert "Binned: each column is 8 consecutive ranks" in svg
    assert svg.count("<rect") <= 6 * charts.HEAT_MAX_COLUMNS + charts.HEAT_MAX_BANDS + 10
    assert f"(rank {OUT})" in svg  # the outlier's bin names it as its max
    assert len(html) < 3_000_000


def test_heatmap_below_the_threshold_is_one_rank_per_column(big):
    small = copy.copy(big)
    small.ranks = big.ranks[:charts.HEAT_MAX_COLUMNS]
    svg = charts.heatmap(small)
    assert "Binned" not in svg and "rank 0:" in svg


def test_packed_summary_round_trips_and_stays_small(big, tmp_path):
    d = big.to_dict()
    raw = summary_bytes(d)
    # per rank: 16,384 ranks in ≤ 47.5 MB, under the ladder's 64 MB target (benchmarks/ladder.py); 2,800 until the
    # simulated gains, the launch waits and the fp32-convolution hints joined every rank (2,851 measured); 2,900
    # until `norm_fusion` (null on these ranks: ~4 bytes each; 2,904 measured)
    assert len(raw) <= 2910 * N
    packed = orjson.loads(raw)
    assert packed["schema_version"] == 3 and packed["encoding"] == "columnar"
    back = unpack(packed)
    kept = sum(1 for r in back["ranks"] for m in r["memory"] if m["timeline"])
    assert kept == min(MEMORY_TIMELINES, sum(1 for r in d["ranks"] for m in r["memory"] if m["timeline"]))
    for r in d["ranks"]:  # everything else is exact
        for m in r["memory"]:
            m["timeline"] = []
    for r in back["ranks"]:
        for m in r["memory"]:
            m["timeline"] = []
    d["schema_version"] = back["schema_version"]
    assert back == d
    p = tmp_path / "s.json"
    p.write_bytes(raw)
    a = read_summary(str(p))
    assert len(a.ranks) == N and a.rank(OUT).step_time_ms == big.rank(OUT).step_time_ms


def test_small_summaries_stay_indented_schema_2(big):
    d = copy.copy(big)
    d.ranks = big.ranks[:PACK_ABOVE_RANKS]
    raw = summary_bytes(d.to_dict())
    assert raw.startswith(b"{\n  ") and orjson.loads(raw)["schema_version"] == 2


def test_pack_leaves_its_input_alone(big):
    d = copy.copy(big)
    d.ranks = big.ranks[:300]
    src = d.to_dict()
    before = orjson.dumps(src)
    pack(src)
    assert orjson.dumps(src) == before


def test_ranges_are_short_at_any_size():
    assert ranges(list(range(16384))) == "0-16383"
    assert ranges(list(range(3, 16384, 8))) == "3-16379 step 8"
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    text = ranges([i * i for i in range(1000)])
    assert text.endswith("(979 more)") and len(text) < 200


def test_same_number_in_terminal_and_report(big):
    text = render(big, width=160, colour=False)
    html = render_html(big)
    want = fmt(big.aggregate.step_time_ms, "ms")
    assert want in text and want in html


def test_report_names_the_schema_the_summary_file_carries(big):
    """Above 256 ranks the file is packed schema 3: the report's run table said the in-memory schema 2."""
    for a in (big, dataclasses.replace(big, ranks=big.ranks[:8])):
        written = orjson.loads(summary_bytes(a.to_dict()))["schema_version"]
        assert f"(summary schema {written})" in render_html(a)
