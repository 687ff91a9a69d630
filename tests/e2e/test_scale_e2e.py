"""A 2,048-rank generated job through the whole command line: `analyze` with rules, summary, report and
timeline, then `check` and `diff` on its summary. Before: OverflowError in the straggler rule from 256 ranks
on, a 35 MB summary, a heatmap of 2,048 sub-pixel columns and group names 2,048 numbers long.

Slow (2,048 small traces written and parsed: about a minute on 2 cores); CI runs it with the slow suite.
"""

from __future__ import annotations

import os
import re

import orjson
import pytest
from click.testing import CliRunner

from benchmarks import generate
from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.summary import read_summary, summary_bytes

pytestmark = pytest.mark.slow
N = 2048


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"GITHUB_ACTIONS": "", "COLUMNS": "160"})


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    base = tmp_path_factory.mktemp("scale2k")
    traces = base / "traces"
    generate.write_set(str(traces), ranks=N, mb=0.05, steps=3)
    out = base / "out"
    r = _run("analyze", traces, "--json", out / "s.json", "--report", out / "r.html",
             "--timeline", out / "t.json", "--ranks", "0-15")
    return r, out


def test_analyze_runs_end_to_end_with_rules(job):
    r, out = job
    assert r.exit_code == 0, r.output[-2000:]
    assert f"{N} ranks analysed" in r.output
    a = read_summary(str(out / "s.json"))
    assert len(a.ranks) == N and a.findings  # the rules ran (the generated job is near its memory capacity)
    assert (out / "r.html").stat().st_size < 3_000_000
    tl = orjson.loads((out / "t.json").read_bytes())
    assert {e.get("pid") for e in tl["traceEvents"] if e.get("ph") == "X"}  # the timeline was written


def test_outputs_are_bounded(job):
    r, out = job
    lines = r.output.splitlines()
    # every section's rows are capped (16 ranks, 10 ops, 5 sequences...), so the page does not grow with the
    # ranks; the budget grew with the sections (idle by cause, op → kernel, launches, per step, the typical step
    # beside the mean critical path: one line per rank shown, at most the table's 16)
    assert len(lines) < 280
    assert sum(1 for ln in lines if re.match(r"^\d+\s", ln)) <= 80  # rows that start with a rank number
    assert max(map(len, lines)) < 400  # no group printed as 2,048 ranks
    assert "more ranks in the JSON summary" in r.output
    html = (out / "r.html").read_text()
    assert html.count("<tr") < 400
    assert "Binned: each column is 4 consecutive ranks" in html
    raw = (out / "s.json").read_bytes()
    assert len(raw) <= 64e6 * N / 16384  # the 16k bound, per rank
    assert orjson.loads(raw)["schema_version"] == 3


def test_same_numbers_everywhere(job):
    r, out = job
    a = read_summary(str(out / "s.json"))
    step = fmt(a.aggregate.step_time_ms, "ms")
    assert f"mean step time {step}" in r.output
    assert step in (out / "r.html").read_text()
    d = _run("diff", out / "s.json", out / "s.json")
    assert d.exit_code == 0, d.output[-2000:]
    assert step.replace(" ms", "") in d.output


def test_check_passes_on_itself_and_catches_one_slow_rank(job, tmp_path):
    r, out = job
    ok = _run("check", out / "s.json", "--baseline", out / "s.json")
    assert ok.exit_code == 0, ok.output[-2000:]
    assert len(ok.output.splitlines()) < 60
    a = read_summary(str(out / "s.json"))
    slow = a.ranks[1500]
    slow.step_time_ms *= 1.5
    bad = tmp_path / "slow.json"
    bad.write_bytes(summary_bytes(a.to_dict()))
    res = _run("check", bad, "--baseline", out / "s.json")
    assert res.exit_code == 1, res.output[-2000:]
    assert "rank 1500" in res.output and "step_time" in res.output
    assert len(res.output.splitlines()) < 60
    d = _run("diff", out / "s.json", bad)
    assert d.exit_code == 0 and len(d.output.splitlines()) < 150
    assert os.path.getsize(bad) <= 64e6 * N / 16384
