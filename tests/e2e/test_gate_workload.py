"""The project gates itself: a tiny 2-rank CPU `dp2` run passes the committed baseline, and the same run
with DDP's overlap taken away (one gradient bucket, reduced only after backward) fails it on overlap.

The baseline (baselines/dp2-cpu.json) and its gates (baselines/gates.toml) were recorded and tuned with
exactly RUN_ARGS below; the fast test checks they still agree, the slow ones run the workload.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "baselines" / "dp2-cpu.json"
GATES = ROOT / "baselines" / "gates.toml"
RUN_ARGS = ["--workload", "dp2", "--profile-steps", "1,1,8"]
OVERLAPPED_BUCKET_MB = 0.25  # 9 buckets per step for the tiny model: all-reduces run under backward
SINGLE_BUCKET_MB = 1000  # one bucket: the all-reduce starts when backward is done


def llmdiag(*args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", *map(str, args)], cwd=ROOT, check=False,
                          capture_output=True, text=True, timeout=timeout)


def run_and_check(tmp_path: Path, bucket_cap_mb: float, *extra: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out = tmp_path / "run"
    r = llmdiag("run", *RUN_ARGS, "--bucket-cap-mb", bucket_cap_mb, *extra, "--out", out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    verdict, junit = tmp_path / "verdict.json", tmp_path / "gate.xml"
    c = llmdiag("check", out, "--baseline", BASELINE, "--config", GATES, "--json", verdict, "--junit", junit)
    assert verdict.exists(), c.stdout + c.stderr
    return c, json.loads(verdict.read_text()), junit


def test_baseline_matches_the_workload_and_gates():
    from llmdiag.diagnose.gate.config import build_gates
    from llmdiag.diagnose.gate.sides import load_side

    s = load_side(str(BASELINE))
    assert s.world_size == 2 and s.trace_kind == "cpu" and len(s.ranks) == 2
    man = s.manifest
    assert (man.option("workload"), man.option("profile_steps"), man.option("bucket_cap_mb")) == (
        "dp2", RUN_ARGS[3], OVERLAPPED_BUCKET_MB)
    assert all(r.overlap_ratio is not None for r in s.ranks)
    assert BASELINE.stat().st_size < 64_000  # slim: no memory timelines
    gates, _ = build_gates(str(GATES), {}, None)
    assert {("overlap_ratio", "max_drop"), ("overlap_ratio", "min"), ("memory_peak", "max_rise")} <= {
        (g.metric, g.rule) for g in gates}


@pytest.mark.slow
def test_dp2_passes_its_baseline(tmp_path):
    pytest.importorskip("torch")
    c, v, junit = run_and_check(tmp_path, OVERLAPPED_BUCKET_MB)
    assert c.returncode == 0, c.stdout + c.stderr
    assert v["status"] == "pass" and v["aggregate_only"] is False
    assert all(r["status"] == "pass" for r in v["results"]), v["results"]
    assert ET.parse(junit).getroot().get("failures") == "0"


@pytest.mark.slow
def test_dp2_without_overlap_fails_the_gate(tmp_path):
    pytest.importorskip("torch")
    c, v, junit = run_and_check(tmp_path, SINGLE_BUCKET_MB)
    assert c.returncode == 1, c.stdout + c.stderr
    by = {(r["metric"], r["rule"]): r for r in v["results"]}
    assert by[("overlap_ratio", "max_drop")]["status"] == "fail", c.stdout
    assert by[("overlap_ratio", "min")]["status"] == "fail", c.stdout
    assert by[("memory_peak", "max_rise")]["status"] == "pass"  # the gate names the right culprit
    assert "overlap_ratio" in c.stdout and "FAIL" in c.stdout
    failures = [f.get("message") for f in ET.parse(junit).getroot().iter("failure")]
    assert any(m.startswith("overlap_ratio (worst) dropped by") for m in failures), failures


@pytest.mark.slow
def test_a_2x_slower_rank_fails_the_gate(tmp_path):
    """One rank computing twice as long makes the other wait in its all-reduces: the worst rank's overlap drops
    and its exposed communication rises past 1.5σ of the baseline's noise (docs/ci.md, "Measured": 4 of 4 such
    runs failed, 20 of 20 healthy ones passed), and the note names the option that differs."""
    pytest.importorskip("torch")
    c, v, _ = run_and_check(tmp_path, OVERLAPPED_BUCKET_MB, "--inject-slow", "rank:0:2")
    assert c.returncode == 1, c.stdout + c.stderr
    by = {(r["metric"], r["rule"]): r["status"] for r in v["results"]}
    assert "fail" in (by[("overlap_ratio", "max_drop")], by[("exposed_comm", "max_rise")]), c.stdout
    assert by[("memory_peak", "max_rise")] == "pass"
    assert any("inject_slow: A None, B rank:0:2" in n for n in v["notes"]), v["notes"]
