"""What the runs not analysed hold (rules/other_runs.py), checked against the real traces' own events read with
plain gzip/json: B2's run 1 (kineto resnet50, num_workers=4) has step 9 about 37 ms longer than its median with
the same GPU work (host jitter), A3's run 1 (torchrec, 4 ranks) its step 5 held by allocator calls, B1's run 1
no outlier; a single-run input has no line."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_runs

REAL = Path("../shared/fixtures/real")
B2 = REAL / "kineto/samples/resnet50_num_workers_4"
A3 = REAL / "torchrec/sst_long_a2a_optimizer_5_qcomm"
B1 = REAL / "kineto/samples/resnet50_num_workers_0"

pytestmark = pytest.mark.skipif(not B2.exists(), reason="real fixtures absent")


def _events(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def _steps(ev: list[dict]) -> dict[int, tuple[float, float]]:
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in ev
            if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")}


def _lines(a) -> list[str]:
    return [i.message for i in a.issues if i.message.startswith("not analysed: run ")]


def test_b2_run1_step9_host_jitter():
    (a,) = analyze_runs(str(B2), jobs=1)
    (line,) = _lines(a)
    (o,) = a.runs[0].outliers
    ev = _events(sorted(B2.iterdir())[0])  # run 1: the older capture
    st = _steps(ev)
    host = {k: (e - s) / 1e3 for k, (s, e) in st.items()}
    med = statistics.median(v for k, v in host.items() if k != min(host))  # after the first, as the test's
    assert o.step == max(host, key=lambda k: host[k] if k != min(host) else 0) == 9
    assert abs((o.time_ms - o.median_ms) - (host[9] - med)) < 1.0  # device window vs host step: within 1 ms
    kern = {k: sum(e["dur"] for e in ev if e.get("cat") == "Kernel" and s <= e["ts"] < t) / 1e3
            for k, (s, t) in st.items()}
    others = statistics.median(v for k, v in kern.items() if k not in (9, min(kern)))
    assert abs(kern[9] - others) < 0.1 * others  # the same GPU work: the host took the extra time
    assert o.category == "cpu_bound" and o.held_by == "" and "outlier step 9" in line and "--run 1" in line


def test_a3_run1_step5_allocator():
    (a,) = analyze_runs(str(A3), jobs=1)
    (line,) = _lines(a)
    (o,) = a.runs[0].outliers
    assert (o.step, o.ranks, o.held_by, o.of_all) == (5, 4, "allocator", True)
    f = next(p for p in sorted(A3.iterdir()) if f"_{54105 + o.rank}." in p.name)  # run 1: pids 54105-54108
    ev = _events(f)
    s, e = _steps(ev)[5]
    calls = sum(x["dur"] for x in ev if x.get("name") in ("cudaMalloc", "cudaFree") and s <= x["ts"] < e) / 1e3
    assert o.grew_ms <= calls + 1e-6 and o.grew_ms >= 0.5 * (o.time_ms - o.median_ms)
    assert "longest step 5 on 4 ranks" in line and "allocator calls" in line
    # rank 2's host stall in both runs: the independent reading (review truth A3, from the events) has its
    # device idle 17.5-21.2 ms per steady step in both runs, the other ranks 1.1-3.7 ms
    one, two = a.runs
    for r in (one, two):
        assert r.idle_rank == 2 and 17.5 <= r.idle_rank_ms <= 21.2 and r.idle_median_ms <= 3.7
    assert "rank 2 idles 20.36 ms in its median step" in line and "(in run 2 too: 20.09 ms)" in line


def test_b1_run1_no_outlier_and_slower():
    (a,) = analyze_runs(str(B1), jobs=1)
    (line,) = _lines(a)
    one, two = a.runs
    assert one.outliers == [] and "; no outlier step; " in line
    host = {k: (e - s) / 1e3 for k, (s, e) in _steps(_events(sorted(B1.iterdir())[0])).items()}
    med = statistics.median(host.values())
    assert all(v < 1.2 * med for v in host.values())  # none 1.2× its median: no outlier to state
    assert one.step_ms > 1.1 * two.step_ms and "mean step" in line  # capture 1 ~23 ms slower per step


def test_single_run_has_no_line():
    (a,) = analyze_runs(str(REAL / "hta/ns_resolution_rank-0.pt.trace.json.gz"), jobs=1)
    assert a.runs == [] and _lines(a) == []
