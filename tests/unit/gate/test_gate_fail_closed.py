"""The gate fails closed (issue 17 case 1, issue 15's check items, issue 29): a run that did not really run
never passes `llmdiag check`, each reason is in the output, the JUnit and the job summary, and each can be
allowed explicitly (`--allow-*`). Sides are real folders of generated traces or summaries analysed from them.

Each row of docs/ci.md's verdict table names one `test_verdict_*` test here, and each such test is one row
(`test_verdict_table_matches_the_tests`).
"""

from __future__ import annotations

import ast
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.main import main as cli_main
from tests.gen.builder import gpu_rank


def run(*args, tmp=None):
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp / "step.md")} if tmp else {"GITHUB_ACTIONS": ""}
    r = CliRunner().invoke(cli_main, ["check", *map(str, args)], env=env)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    return r


def slow_rank(r, world):
    """gpu_rank with 2 ms more compute per step (device window 0.8 -> 2.8 ms)."""
    b = gpu_rank(r, world_size=world, step_us=4000)
    for k in range(1, 3):
        b.kernel("void gemm_kernel<float>()", (k - 1) * 4000 + 900, 2000, stream=7, launch_at=(k - 1) * 4000 + 12)
    return b


def folder(d, ranks=(0, 1), world=2, slow=()):
    d.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        (slow_rank(r, world) if r in slow else gpu_rank(r, world_size=world)).write(d / f"rank{r}.json")
    return d


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("base")
    p = d / "base.json"
    p.write_bytes(orjson.dumps(analyze_path(str(folder(d / "run")), jobs=1).to_dict()))
    return p


def junit_failures(path) -> dict[str, str]:
    suite = ET.parse(path).getroot().find("testsuite")
    return {c.get("name"): c.find("failure").get("message") for c in suite.findall("testcase")
            if c.find("failure") is not None}


def test_verdict_pass(tmp_path, base):
    r = run(folder(tmp_path / "cur"), "--baseline", base)
    assert r.exit_code == 0, r.output


def test_verdict_run_failed(tmp_path, base):
    cur = folder(tmp_path / "cur")
    (cur / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "status": "failed", "world_size": 2, "failure": {"reason": "rank 1: CUDA OOM"},
        "rank_status": {"0": {"status": "ok"}, "1": {"status": "failed", "error": "boom"}}}))
    junit = tmp_path / "j.xml"
    r = run(cur, "--baseline", base, "--strict", "--junit", junit, tmp=tmp_path)
    assert r.exit_code == 1, r.output
    assert "marked failed in its manifest" in r.output and "rank 1: CUDA OOM" in r.output
    assert "--allow-failed-run" in r.output
    fails = junit_failures(junit)
    assert "current run_failed" in fails and "CUDA OOM" in fails["current run_failed"]
    assert "FAIL" in (tmp_path / "step.md").read_text() and "run_failed" in (tmp_path / "step.md").read_text()
    # opted out: the problem is still reported, as allowed; the (good) numbers decide
    r = run(cur, "--baseline", base, "--allow-failed-run", "--allow-missing-ranks")
    assert r.exit_code == 0, r.output
    assert "allowed by --allow-failed-run" in r.output


def test_running_manifest_is_not_a_finished_run(tmp_path, base):
    cur = folder(tmp_path / "cur")
    (cur / "manifest.json").write_text(json.dumps({"schema_version": 1, "status": "running", "world_size": 2}))
    r = run(cur, "--baseline", base)
    assert r.exit_code == 1 and "marked running" in r.output


def test_verdict_ranks_missing(tmp_path, base):
    cur = folder(tmp_path / "cur", ranks=(0, 1), world=128)
    r = run(cur, "--min-overlap", "0")
    assert r.exit_code == 1, r.output
    assert "126 of 128 ranks" in r.output and "2-127" in r.output and "3, 4" not in r.output
    assert run(cur, "--min-overlap", "0", "--allow-missing-ranks").exit_code == 0


def test_verdict_ranks_left_out(tmp_path, base):
    """rank 1 is slow; a stray (different) copy of a fast rank 1 lies beside it: which one is right cannot be
    told, so the rank is left out, and the gate fails instead of passing on rank 0 alone."""
    cur = folder(tmp_path / "cur", slow=(1,))
    gpu_rank(1, world_size=2).write(cur / "copy_of_rank1.json")
    r = run(cur, "--baseline", base)
    assert r.exit_code == 1, r.output
    assert "ranks_left_out" in r.output or "left out" in r.output


def test_verdict_ranks_duplicate(tmp_path, base):
    cur = folder(tmp_path / "cur", slow=(1,))
    (cur / "backup").mkdir()
    (cur / "backup" / "rank1.json").write_bytes((cur / "rank1.json").read_bytes())
    r = run(cur, "--baseline", base, "--max-step-time-rise", "1000%")
    assert r.exit_code == 1 and "ranks 1 had more than one trace file" in r.output, r.output
    r = run(cur, "--baseline", base, "--max-step-time-rise", "1000%", "--allow-duplicate-ranks")
    assert r.exit_code == 0, r.output
    # the slow rank's own numbers are gated, not dropped: a normal step-time gate catches it
    assert run(cur, "--baseline", base, "--allow-duplicate-ranks").exit_code == 1


def test_verdict_empty(tmp_path, base):
    s = orjson.loads(base.read_bytes())
    s["ranks"] = []
    p = tmp_path / "empty.json"
    p.write_bytes(orjson.dumps(s))
    for extra in ((), ("--allow-missing-ranks", "--allow-undefined", "--allow-failed-run")):
        r = run(p, "--baseline", base, *extra)
        assert r.exit_code == 1 and "empty summary" in r.output, r.output


def test_verdict_input_error(tmp_path, base):
    s = orjson.loads(base.read_bytes())
    s["ranks"][0]["step_time_ms"] = "12"
    p, junit = tmp_path / "s.json", tmp_path / "j.xml"
    p.write_bytes(orjson.dumps(s))
    r = run(p, "--baseline", base, "--junit", junit, tmp=tmp_path)
    assert r.exit_code == 2 and r.output.strip().count("\n") == 0
    assert "step_time_ms is not a number" in r.output
    err = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert err is not None and "step_time_ms" in err.get("message")
    assert "ERROR" in (tmp_path / "step.md").read_text()


def test_verdict_metric_undefined(tmp_path, base):
    """Renamed communication kernels: the current run has no communication, so no overlap ratio."""
    s = orjson.loads(base.read_bytes())
    for r in s["ranks"]:
        r["overlap_ratio"] = None
    p = tmp_path / "nocomm.json"
    p.write_bytes(orjson.dumps(s))
    r = run(p, "--baseline", base)
    assert r.exit_code == 1 and "overlap_ratio is undefined" in r.output, r.output
    assert run(p, "--baseline", base, "--allow-undefined").exit_code == 0
    # an absolute gate without a baseline cannot be evaluated either
    assert run(p, "--min-overlap", "0.5").exit_code == 1


@pytest.mark.parametrize("limit", ["20%", "0.2"])
def test_ratio_limits_in_percent_or_fraction(tmp_path, base, limit):
    r = run(base, "--max-exposed-comm", limit)
    # each rank's exposed comm is 200 of 800 µs = 25%: above 20% either way, printed in percent
    assert r.exit_code == 1 and "25.0%" in r.output, r.output
    assert run(base, "--max-exposed-comm", "30%").exit_code == 0


def test_infinite_limit_is_refused_like_toml_does(tmp_path, base):
    r = run(base, "--baseline", base, "--max-step-time-rise", "1e999")
    assert r.exit_code == 2 and "finite" in r.output


def _summary(base, tmp_path, name, edit):
    s = orjson.loads(base.read_bytes())
    edit(s)
    p = tmp_path / name
    p.write_bytes(orjson.dumps(s))
    return p


def test_verdict_ranks_absent_from_summary(tmp_path, base):
    """A summary whose rank list lacks a rank of its world, without naming it missing (truncated, hand-edited):
    the absent rank is missing all the same."""
    p = _summary(base, tmp_path, "cut.json", lambda s: s["ranks"].pop())
    r = run(p, "--baseline", base, "--agg", "mean")
    assert r.exit_code == 1 and "1 of 2 ranks have no analysed trace (ranks 1)" in r.output, r.output
    # allowed, the rank is still gone from a metric the baseline has on it
    assert run(p, "--baseline", base, "--allow-missing-ranks").exit_code == 1
    assert run(p, "--baseline", base, "--allow-missing-ranks", "--allow-undefined").exit_code == 0


def test_verdict_rank_listed_twice(tmp_path, base):
    def twice(s):
        s["ranks"].append({**s["ranks"][0], "overlap_ratio": 0.99})
    p = _summary(base, tmp_path, "twice.json", twice)
    r = run(p, "--baseline", base, "--agg", "mean")
    assert r.exit_code == 1 and "ranks 0 appear more than once in the rank list" in r.output, r.output
    assert run(p, "--baseline", base, "--agg", "mean", "--allow-duplicate-ranks").exit_code == 0


def test_verdict_metric_vanished_on_some_ranks(tmp_path, base):
    """Issue 29: overlap null on rank 1 only; the mean over rank 0 alone passed every aggregation."""
    p = _summary(base, tmp_path, "hole.json", lambda s: s["ranks"][1].update(overlap_ratio=None))
    for agg in ("mean", "rank", "worst", "min", "max"):
        r = run(p, "--baseline", base, "--agg", agg)
        assert r.exit_code == 1 and "overlap_ratio is undefined on ranks 1, where the baseline has it" in r.output
    assert run(p, "--baseline", base, "--allow-undefined").exit_code == 0


def test_verdict_metric_partial_in_a_side(tmp_path, base):
    """Without a baseline (absolute gates) a metric defined on some ranks only fails too; so does a baseline
    with such a hole, against a complete current run."""
    p = _summary(base, tmp_path, "hole.json", lambda s: s["ranks"][0].update(overlap_ratio=None))
    r = run(p, "--min-overlap", "0")
    assert r.exit_code == 1 and "overlap_ratio is undefined on ranks 0 and defined on ranks 1" in r.output, r.output
    r = run(base, "--baseline", p, "--max-overlap-drop", "1")
    assert r.exit_code == 1 and "baseline: overlap_ratio is undefined on ranks 0" in r.output, r.output


def test_verdict_metric_missing_from_baseline(tmp_path, base):
    """A gate against a baseline that lacks the metric the current run has: stale baseline, cannot compare."""
    def nocomm(s):
        for r in s["ranks"]:
            r["overlap_ratio"] = None
    p = _summary(base, tmp_path, "nocomm.json", nocomm)
    r = run(base, "--baseline", p, "--max-overlap-drop", "0.05")
    assert r.exit_code == 1 and "baseline: overlap_ratio is undefined while the current run has it" in r.output
    assert run(base, "--baseline", p, "--max-overlap-drop", "0.05", "--allow-undefined").exit_code == 0


def test_verdict_undefined_on_both_sides(tmp_path, base):
    def nocomm(s):
        for r in s["ranks"]:
            r["overlap_ratio"] = None
    p = _summary(base, tmp_path, "nocomm.json", nocomm)
    r = run(p, "--baseline", p, "--max-overlap-drop", "0.05")
    assert r.exit_code == 0 and "n/a" in r.output, r.output
    assert run(p, "--baseline", p, "--max-overlap-drop", "0.05", "--strict").exit_code == 1


def test_verdict_regression(tmp_path, base):
    """Numbers past a limit: the gate fails (the generated slow rank takes 2 ms more per step)."""
    r = run(folder(tmp_path / "cur", slow=(1,)), "--baseline", base)
    assert r.exit_code == 1 and "step_time" in r.output and "FAIL" in r.output, r.output


def test_verdict_limit_out_of_range(tmp_path, base):
    """A limit its metric can never exceed (a ratio above 1, a drop above 100 %): refused, flag and config alike."""
    r = run(base, "--baseline", base, "--max-overlap-drop", "10")
    assert r.exit_code == 2 and "ratio in [0, 1]" in r.output, r.output
    cfg = tmp_path / "g.toml"
    cfg.write_text("[step_time]\nmax_drop = \"150%\"\n")
    r = run(base, "--baseline", base, "--config", cfg)
    assert r.exit_code == 2 and "at most 100%" in r.output and str(cfg) in r.output, r.output


CI_MD = Path(__file__).resolve().parents[3] / "docs" / "ci.md"


def test_verdict_table_matches_the_tests():
    """docs/ci.md's verdict table and the `test_verdict_*` tests are one to one: each row names its test, each
    such test is named by exactly one row, and every fail-closed reason has a row."""
    from llmdiag.diagnose.gate.inputs import OPT_OUTS

    text = CI_MD.read_text()
    table = text[text.index("| reason | fires when |"):].split("\n\n")[0].splitlines()[2:]
    named = [m.group(1) for row in table for m in [re.search(r"`(test_verdict_\w+)`\s*\|\s*$", row)] if m]
    assert len(named) == len(table), [row for row in table if "test_verdict_" not in row]
    tree = ast.parse(Path(__file__).read_text())
    defined = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test_verdict_")
               and f.name != "test_verdict_table_matches_the_tests"]
    assert sorted(named) == sorted(defined)
    reasons = {m for row in table for m in re.findall(r"^\| `(\w+)`", row)}
    assert set(OPT_OUTS) <= reasons


def test_undefined_allowed_by_metric_name(tmp_path, base):
    """`--allow-undefined-metric M` (config: `allow = ["undefined:M"]`) accepts a hole in M alone: a hole in another
    gated metric still fails."""
    def holes(s):
        s["ranks"][1]["overlap_ratio"] = None
        s["ranks"][1]["memory"] = []
    p = _summary(base, tmp_path, "holes.json", holes)
    args = (p, "--baseline", base, "--max-overlap-drop", "1", "--max-memory-rise", "100%")
    r = run(*args, "--allow-undefined-metric", "memory_peak")
    assert r.exit_code == 1 and "or --allow-undefined-metric overlap_ratio" in r.output, r.output
    assert run(*args, "--allow-undefined-metric", "memory_peak", "--allow-undefined-metric", "overlap").exit_code == 0
    cfg = tmp_path / "g.toml"
    cfg.write_text('allow = ["undefined:memory_peak", "undefined:overlap_ratio"]\n')
    assert run(*args, "--config", cfg).exit_code == 0
    cfg.write_text('allow = ["undefined:memroy_peak"]\n')
    assert run(*args, "--config", cfg).exit_code == 2
    assert run(*args, "--allow-undefined-metric", "nonsense").exit_code == 2
