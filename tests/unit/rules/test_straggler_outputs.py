"""Issue #27: the terminal, the HTML report, the JSON summary and `--tables` list the same stragglers, in the
same order, with the same numbers (rank, host, reason, share, imposed wait, gain and its kind).

A generated 4-rank trace plants one arrival straggler whose answer the test computes itself; a real TorchRec
run (rank 2 late at its all_to_all) checks the same agreement on events we did not write."""

from __future__ import annotations

import html as htmlmod
import re
from pathlib import Path

import orjson
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.export import tables as tb
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules import findings
from llmdiag.reports.render import render_html
from tests.gen.builder import TraceBuilder

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
TORCHREC = REAL / "torchrec" / "sst_long_a2a_optimizer_3"
STEPS, LATE_US, WORLD, PLANTED = 4, 100, 4, 3


def _rank(rank: int, late_us: int = LATE_US) -> TraceBuilder:
    """Per step a 500 µs GEMM, then two all-reduces. Ranks 0..2 post each at +5·r µs; rank 3 posts late_us
    after rank 2, so it alone is last at every all-reduce and imposes late_us on each (its start − the
    second-latest start). Every rank's all-reduce ends together, 150 µs after rank 3 posts."""
    b = TraceBuilder(rank=rank, world_size=WORLD)
    for k in range(1, STEPS + 1):
        k0 = (k - 1) * 2000
        b.step(k, k0, k0 + 2000)
        b.kernel("void gemm_kernel<float>()", k0 + 100, 500, stream=7, launch_at=k0 + 10)
        for j, base in enumerate((700, 1300)):
            post = k0 + base + (5 * 2 + late_us if rank == PLANTED else 5 * rank)
            end = k0 + base + 5 * 2 + late_us + 150
            b.nccl("allreduce", post, end - post, stream=20, launch_at=k0 + 11 + j, nelems=1 << 20,
                   group_size=WORLD, pg_ranks=list(range(WORLD)))
    return b


def _outputs(a: Analysis) -> tuple[str, str, dict, dict]:
    a.findings = findings(a)
    text = re.sub(r"\s+", " ", render(a, width=400))
    page = re.sub(r"\s+", " ", htmlmod.unescape(re.sub(r"<[^>]+>", " ", render_html(a))))
    summary = orjson.loads(orjson.dumps(a.to_dict()))
    tables = {k: v.to_pylist() for k, v in tb.arrow_tables(a).items()}
    return text, page, summary, tables


def _agree(a: Analysis) -> list[dict]:
    """Every output shows each straggler of the summary, in the table's order, with its own numbers."""
    text, page, summary, tables = _outputs(a)
    rows, js = tables["stragglers"], summary["skew"]["stragglers"] if summary.get("skew") else []
    assert sorted(r["rank"] for r in rows) == sorted(x["rank"] for x in js)
    by_rank = {x["rank"]: x for x in js}
    for r in rows:
        x = by_rank[r["rank"]]
        assert (r["kind"], r["reason"], r["value_frac"], r["imposed_ms_per_step"], r["last_n"], r["matched_n"],
                r["gain_ms_per_step"], r["gain_kind"]) == (x["kind"], x["reason"], x["value"], x["imposed_ms"],
                                                           x["last_n"], x["matched_n"], x["gain_ms"], x["gain_kind"])
        reason = re.sub(r"\s+", " ", x["reason"])
        line = f"rank {r['rank']} ({r['host']}): {reason}"
        assert line in text, line
        assert reason in page and fmt(x["value"], "pct") in page
        if x["kind"]:  # the imposed wait and the gain are printed inside the reason, formatted once
            assert f"imposing {fmt(x['imposed_ms'], 'ms')} of waiting per step" in reason
            assert f"the step gains {fmt(x['gain_ms'], 'ms')} ({x['gain_kind']})" in reason
    # one order: the terminal's and the report's lines follow the table's rows
    at = [text.index(f"rank {r['rank']} ({r['host']}): ") for r in rows]
    assert at == sorted(at)
    at = [page.index(re.sub(r"\s+", " ", r["reason"])) for r in rows]
    assert at == sorted(at)
    # the ranks table's imposed_ms is the same wait over the whole trace
    ranks = {r["rank"]: r for r in tables["ranks"]}
    steps = len(a.ranks[0].steps)
    for r in rows:
        if r["kind"]:
            assert ranks[r["rank"]]["imposed_ms"] == pytest.approx(r["imposed_ms_per_step"] * steps)
    return rows


def test_planted_straggler_same_everywhere(tmp_path):
    for b in (_rank(r) for r in range(WORLD)):
        b.write(tmp_path / f"rank{b.rank}.pt.trace.json")
    rows = _agree(analyze_path(str(tmp_path), jobs=1))
    assert [(r["rank"], r["kind"], r["last_n"], r["matched_n"]) for r in rows] == \
           [(PLANTED, "allreduce", 2 * STEPS, 2 * STEPS)]
    assert rows[0]["value_frac"] == 1.0
    assert rows[0]["imposed_ms_per_step"] == pytest.approx(2 * LATE_US / 1000)
    assert rows[0]["gain_kind"] in ("simulated", "bound") and rows[0]["gain_ms_per_step"] is not None


def test_twin_without_the_plant_has_no_straggler(tmp_path):
    """Rank 3 posts with rank 2 (a tie, no one alone last): no straggler anywhere."""
    for b in (_rank(r, late_us=0) for r in range(WORLD)):
        b.write(tmp_path / f"rank{b.rank}.pt.trace.json")
    a = analyze_path(str(tmp_path), jobs=1)
    assert _agree(a) == []
    assert "Stragglers (" not in render(a, width=400)


@pytest.mark.real(TORCHREC)
def test_real_torchrec_same_everywhere():
    rows = _agree(analyze_path(str(TORCHREC), jobs=1))
    assert rows, "the TorchRec run has a late rank at its all_to_all"
