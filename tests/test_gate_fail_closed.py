"""The gate fails closed (issue 17 case 1, issue 15's check items): a run that did not really run never
passes `llmdiag check`, each reason is in the output, the JUnit and the job summary, and each can be allowed
explicitly (`--allow-*`). Sides are real folders of generated traces or summaries analysed from them.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import orjson
import pytest
from click.testing import CliRunner

from diagnose.analyze import analyze_path
from diagnose.cli.main import main as cli_main
from tests.builder import gpu_rank


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


def test_good_run_passes(tmp_path, base):
    r = run(folder(tmp_path / "cur"), "--baseline", base)
    assert r.exit_code == 0, r.output


def test_run_marked_failed_fails_even_when_numbers_pass(tmp_path, base):
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


def test_missing_rank_fails_and_ranks_print_as_ranges(tmp_path, base):
    cur = folder(tmp_path / "cur", ranks=(0, 1), world=128)
    r = run(cur, "--min-overlap", "0")
    assert r.exit_code == 1, r.output
    assert "126 of 128 ranks" in r.output and "2-127" in r.output and "3, 4" not in r.output
    assert run(cur, "--min-overlap", "0", "--allow-missing-ranks").exit_code == 0


def test_stray_duplicate_of_a_slow_rank_never_passes(tmp_path, base):
    """rank 1 is slow; a stray (different) copy of a fast rank 1 lies beside it: which one is right cannot be
    told, so the rank is left out, and the gate fails instead of passing on rank 0 alone."""
    cur = folder(tmp_path / "cur", slow=(1,))
    gpu_rank(1, world_size=2).write(cur / "copy_of_rank1.json")
    r = run(cur, "--baseline", base)
    assert r.exit_code == 1, r.output
    assert "ranks_left_out" in r.output or "left out" in r.output


def test_identical_duplicate_is_resolved_but_fails_unless_allowed(tmp_path, base):
    cur = folder(tmp_path / "cur", slow=(1,))
    (cur / "backup").mkdir()
    (cur / "backup" / "rank1.json").write_bytes((cur / "rank1.json").read_bytes())
    r = run(cur, "--baseline", base, "--max-step-time-rise", "1000%")
    assert r.exit_code == 1 and "ranks 1 had more than one trace file" in r.output, r.output
    r = run(cur, "--baseline", base, "--max-step-time-rise", "1000%", "--allow-duplicate-ranks")
    assert r.exit_code == 0, r.output
    # the slow rank's own numbers are gated, not dropped: a normal step-time gate catches it
    assert run(cur, "--baseline", base, "--allow-duplicate-ranks").exit_code == 1


def test_empty_summary_always_fails(tmp_path, base):
    s = orjson.loads(base.read_bytes())
    s["ranks"] = []
    p = tmp_path / "empty.json"
    p.write_bytes(orjson.dumps(s))
    for extra in ((), ("--allow-missing-ranks", "--allow-undefined", "--allow-failed-run")):
        r = run(p, "--baseline", base, *extra)
        assert r.exit_code == 1 and "empty summary" in r.output, r.output


def test_metric_as_string_is_an_input_error_in_junit_and_job_summary(tmp_path, base):
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


def test_communication_that_vanished_fails(tmp_path, base):
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
