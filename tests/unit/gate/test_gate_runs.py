"""The gate sees every run and every replica (issue 35, item 2).

- A profiler folder reused across CI runs holds an older complete run and a newer one whose rank 1 is missing or
  cut. `check` refuses to choose between them (exit 2, one line) unless `--run` names one; `--run newest` gates the
  newest and fails on its missing rank; an older complete run never stands in for it. A summary written from such
  a folder records its runs, and is refused the same way.
- dp2 x pp2: one replica's stage going from a 20 % to a 75 % bubble fails every bubble gate. The per-stage values
  were keyed by stage number, so the second replica's rows replaced the first's.

The folders are generated (tests/gen/builder.py through test_runs_folders.write_run): the test knows which file
belongs to which run because it wrote it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main as cli_main
from llmdiag.diagnose.gate.verdict import METRICS, Gate, evaluate, parse_limit
from llmdiag.diagnose.model.analysis import PipelineResult, StageBubble
from tests.gen.summaries import typed
from tests.unit.gate.test_gate import make_summary
from tests.unit.metrics.test_runs_folders import APART_US, WALL_US, write_run

GATE = ["--max-step-time-ms", "1000"]  # an absolute gate every run here passes: the runs decide the verdict


def check(*args):
    r = CliRunner().invoke(cli_main, ["check", *map(str, args)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    return r


@pytest.fixture(params=["missing", "cut"])
def reused_folder(tmp_path, request) -> Path:
    """An older complete run (ranks 0, 1) and a newer run whose rank 1 is missing, or cut mid-file (a crash)."""
    d = tmp_path / "profiler"
    write_run(d, WALL_US, 100, world=2)
    new = write_run(d, WALL_US + APART_US, 200, world=2, ranks=[0, 1] if request.param == "cut" else [0])
    if request.param == "cut":
        raw = new[1].read_bytes()
        new[1].write_bytes(raw[: len(raw) // 2])
    return d


def test_a_folder_of_two_runs_is_refused_without_run(reused_folder):
    r = check(reused_folder, *GATE)
    assert r.exit_code == 2, r.output  # the old gate passed it (exit 0), gating the older complete run
    (line,) = r.output.strip().splitlines()
    assert "holds 2 runs" in line and "run 2, is incomplete" in line and "--run newest" in line


def test_the_newest_incomplete_run_fails_and_is_never_replaced(reused_folder):
    r = check(reused_folder, *GATE, "--run", "newest")
    assert r.exit_code == 1, r.output
    assert "gated run 2 of the 2 runs" in r.output
    assert "no analysed trace (ranks 1)" in r.output or "left out" in r.output
    old = check(reused_folder, *GATE, "--run", "1")  # asked for by number, the older run is gated, and said so
    assert old.exit_code == 0 and "gated run 1 of the 2 runs" in old.output


def test_a_summary_of_such_a_folder_is_refused_unless_run_names_its_run(reused_folder, tmp_path):
    out = tmp_path / "s.json"
    a = CliRunner().invoke(cli_main, ["analyze", str(reused_folder), "--no-report", "--json", str(out), "-q", "-j", "1"])
    assert out.exists(), a.output
    runs = orjson.loads(out.read_bytes())["runs"]
    assert [(x["number"], x["analysed"]) for x in runs] == [(1, True), (2, False)]  # analyze took the complete one
    r = check(out, *GATE)
    assert r.exit_code == 2 and "holds 2 runs" in r.output, r.output
    r = check(out, *GATE, "--run", "newest")
    assert r.exit_code == 2 and "describes run 1" in r.output and "not run 2" in r.output
    assert check(out, *GATE, "--run", "1").exit_code == 0


@pytest.mark.parametrize("bad", ["²", "1" * 5000, "0", "-1", "all"])
def test_bad_run_values_are_one_line(tmp_path, bad):
    s = tmp_path / "s.json"
    s.write_bytes(orjson.dumps(make_summary()))
    r = check(s, *GATE, "--run", bad)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and len(r.output) < 300, r.output


def test_run_beyond_the_input_is_one_line(tmp_path):
    s = tmp_path / "s.json"
    s.write_bytes(orjson.dumps(make_summary()))
    assert check(s, *GATE, "--run", "1").exit_code == 0
    r = check(s, *GATE, "--run", "2")
    assert r.exit_code == 2 and "one run" in r.output


# --- replicas -------------------------------------------------------------------------------------------------

def dp2pp2(bubbles: dict[int, float], groups: bool = True) -> dict:
    """dp2 x pp2: replica 0 = ranks 0 (stage 0), 1 (stage 1); replica 1 = ranks 2, 3. Rows sorted by (stage, rank)
    as bubbles.py writes them, so a stage-number key kept replica 1's row."""
    rows = sorted([StageBubble(r % 2, r, 10.0, bubbles[r], None, 0.2, bubbles[r] - 0.2) for r in range(4)],
                  key=lambda b: (b.stage, b.rank))
    p = PipelineResult("1f1b", 2, 1, 4, 50.0, None, rows, sum(bubbles.values()) / 4, None, 0.2, None, "",
                       groups=[[0, 1], [2, 3]] if groups else [])
    return make_summary(n=4, pipeline=p)


BASE = {0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2}


@pytest.mark.parametrize("groups", [True, False])
@pytest.mark.parametrize("agg", ["worst", "max", "mean", "rank"])
@pytest.mark.parametrize("rule,raw", [("max_rise", 0.05), ("max", 0.4)])  # replica 0: mean 47.5 %, worst 75 %
def test_one_replicas_stage_regressing_fails_every_bubble_gate(groups, agg, rule, raw):
    cur = dp2pp2({**BASE, 1: 0.75}, groups)  # replica 0's stage 1: 20 % -> 75 %
    v = evaluate(typed(cur), typed(dp2pp2(BASE, groups)), [Gate("bubble", rule, parse_limit(raw, METRICS["bubble"],
                                                                                                 rule), agg)])
    assert v.status == "fail", [r.message for r in v.results]
    assert "rank 1" in v.results[0].message or "replica 0" in v.results[0].message


def test_min_gates_each_replicas_best_stage():
    """`--agg min` gates the best stage, now of each replica: a replica whose stages all regressed fails it (the
    old gate saw only replica 1). A single stage rising under an unchanged one cannot move a minimum."""
    g = [Gate("bubble", "max_rise", parse_limit(0.05, METRICS["bubble"], "max_rise"), "min")]
    both = evaluate(typed(dp2pp2({**BASE, 0: 0.5, 1: 0.75})), typed(dp2pp2(BASE)), g)
    assert both.status == "fail" and both.results[0].current == 0.5
    assert evaluate(typed(dp2pp2({**BASE, 1: 0.75})), typed(dp2pp2(BASE)), g).status == "pass"


def test_a_replica_missing_from_the_current_run_fails_closed():
    cur = dp2pp2(BASE)
    cur = copy.deepcopy(cur)
    cur["pipeline"]["stage_bubbles"] = [b for b in cur["pipeline"]["stage_bubbles"] if b["rank"] < 2]
    v = evaluate(typed(cur), typed(dp2pp2(BASE)), [Gate("bubble", "max_rise", parse_limit(
        0.05, METRICS["bubble"], "max_rise"), "mean")])
    assert v.status == "fail" and any("pipeline ranks 2-3" in c.message for c in v.failed_inputs()), v.inputs
