"""Outlier steps (metrics/rank/outlier_ops.py, rules/outlier_steps.py): which steps are outliers, the host ops that
grew read back against the trace's own events (plain json), and the rule's cause, gain, deferral and silence.

The job is tests/expert/planted_recall_outlier.py's: 4 ranks, steps 10-14, in step 13 every one of 60 chore ops
(three names, 20 each) runs 900 us instead of 300 us with the same device work."""

from __future__ import annotations

import copy
import gzip
import json
from functools import partial

import pytest
from pathlib import Path

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.outlier_ops import outlier_ops, outlier_windows
from llmdiag.diagnose.metrics.rank.steps import windows
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.idle import AllocStep
from llmdiag.diagnose.rules import findings as run_rules
from tests.expert import planted
from tests.expert.planted_recall_outlier import N, OP_US, OPS, SLOW, SLOW_STEP, _jitter


def test_outlier_windows_by_hand():
    # first (200) left out; median of 100, 101, 99, 140, 100 is 100, MAD 1: 140 ≥ 1.2 × 100 and 40 ≥ 5 × 1
    assert outlier_windows([200, 100, 101, 99, 140, 100]) == ([4], 100)
    # 125 ≥ 1.2 × 100, but the steps scatter: median 100, deviations 0, 20, 0, 25, 20 -> MAD 20: 25 < 5 × 20
    assert outlier_windows([300, 100, 80, 100, 125, 120]) == ([], 100)
    # 115 is within 1.2 × 100: no outlier however quiet the others
    assert outlier_windows([100, 100, 100, 100, 115])[0] == []
    # fewer than 3 steps after the first: nothing is typical
    assert outlier_windows([100, 100, 300]) == ([], 0.0)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("outlier")
    paths = planted.write(planted.Knobs(chore=_jitter), str(folder))
    return folder, sorted(paths)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    folder = tmp_path_factory.mktemp("outlier_twin")
    planted.write(planted.Knobs(chore=partial(_jitter, slow_step=None)), str(folder))
    return folder


def _by_hand(path: str, op: str, step: int) -> float:
    """ms of `op` events starting inside ProfilerStep#step, read with plain json."""
    ev = [e for e in json.load(gzip.open(path) if path.endswith(".gz") else open(path))["traceEvents"]
          if e.get("ph") == "X"]
    ps = next(e for e in ev if e["name"] == f"ProfilerStep#{step}")
    return sum(e["dur"] for e in ev if e["name"] == op and ps["ts"] <= e["ts"] < ps["ts"] + ps["dur"]) / 1000


def test_metric_names_the_grown_ops(job):
    _, paths = job
    t = load_trace(paths[0])
    classify(t)
    wins, _ = windows(t)
    recs = outlier_ops(t, wins)
    assert [r.step for r in recs] == [SLOW_STEP]
    r = recs[0]
    per_op = N / len(OPS) * OP_US / 1000  # 20 ops × 300 us = 6 ms a name in a typical step
    assert r.time_ms - r.median_ms == pytest.approx(N * (SLOW - 1) * OP_US / 1000, abs=1e-6)  # 36 ms
    assert r.host_ms - r.host_median_ms == pytest.approx(36.0, abs=1e-6)
    assert {g.op for g in r.ops} == set(OPS)
    for g in r.ops:
        assert g.ms == pytest.approx(_by_hand(paths[0], g.op, SLOW_STEP), abs=1e-6) == pytest.approx(SLOW * per_op)
        assert g.median_ms == pytest.approx(_by_hand(paths[0], g.op, 12), abs=1e-6) == pytest.approx(per_op)
    assert r.grown == 3
    assert len(r.threads) == 1 and r.threads[0].ms - r.threads[0].median_ms == pytest.approx(36.0, abs=1e-6)


def test_rule_host_jitter_gain_and_silent_twin(job, twin):
    a = analyze_path(str(job[0]))
    f = [x for x in a.findings if x.id == "outlier_steps"]
    assert len(f) == 1
    f = f[0]
    assert f.gain_ms == pytest.approx(36.0 / 5, abs=1e-3) and f.gain_kind == "bound"
    assert f.evidence.steps == [SLOW_STEP] and f.evidence.ranks == [0, 1, 2, 3]
    assert "the host (cpu_bound) grew the most" in f.evidence.text
    assert "spread over 3 host ops" in f.evidence.text
    b = analyze_path(str(twin))
    assert not [x for x in b.findings if x.id == "outlier_steps"]
    assert all(not r.outlier_ops for r in b.ranks)


def _rerun(a: Analysis) -> list:
    return [x for x in run_rules(a) if x.id == "outlier_steps"]


def test_rule_defers_to_allocator_and_names_a_late_peer(job):
    a = analyze_path(str(job[0]))
    # an allocator flush in that step holding half its excess: allocator_churn names it, not this rule
    b = copy.deepcopy(a)
    for r in b.ranks:
        r.idle.alloc_steps = [AllocStep(step=SLOW_STEP, calls=34, mallocs=9, idle_ms=18.0)]
    assert not _rerun(b)
    # the excess on communication: a late peer or a slow link, which one rank cannot tell
    c = copy.deepcopy(a)
    for r in c.ranks:
        s = next(s for s in r.steps if s.step == SLOW_STEP)
        typical = next(s for s in r.steps if s.step == 12).critical_path
        cp = s.critical_path
        cp.length_ms = typical.length_ms + 36.0
        comm = typical.gpu_communication_bound * typical.length_ms / 100 + 36.0
        for k in ("cpu_bound", "gpu_compute_bound", "gpu_kernel_launch_overhead", "gpu_kernel_kernel_overhead"):
            setattr(cp, k, getattr(typical, k) * typical.length_ms / cp.length_ms)
        cp.gpu_communication_bound = 100 * comm / cp.length_ms
    f = _rerun(c)
    assert len(f) == 1
    assert "communication (gpu_communication_bound) grew the most" in f[0].evidence.text
    # all 4 ranks traced, the job's path waits on none of them in that step: no late peer is seen
    assert a.world_size == 4 and a.critical_path is not None
    assert not next(p for p in a.critical_path.per_step if p.step == SLOW_STEP).waiting_on
    assert "no peer is seen to arrive late" in f[0].evidence.text
    # 4 ranks of 64 traced: a late peer and a slow link look the same, only the others' traces tell
    c.world_size = 64
    f = _rerun(c)
    assert "late peer" in f[0].evidence.text and "other ranks' traces" in f[0].evidence.text
    assert "4 of 64 ranks traced" in f[0].evidence.text


def test_collective_repeats_by_hand(tmp_path):
    """The gloo job of planted_recall_outlier.py: 6 iterations, the 4th's two all-reduces 200 ms longer, one
    ProfilerStep over the first iteration. Durations and starts read back with plain json."""
    from llmdiag.diagnose.metrics.rank.collective_repeats import collective_repeats
    from tests.expert.planted_recall_outlier import _gloo_writer
    path = _gloo_writer(str(tmp_path), "g")[0]
    ev = [e for e in json.load(gzip.open(path) if path.endswith(".gz") else open(path))["traceEvents"]
          if e.get("ph") == "X" and e["name"] == "gloo:all_reduce" and e["tid"] == 200]
    durs = [e["dur"] / 1000 for e in ev]
    assert durs == [150.0, 150.0, 150.0, 350.0, 150.0, 150.0]
    t = load_trace(path)
    classify(t)
    wins, _ = windows(t)
    recs = collective_repeats(t, wins)
    assert len(recs) == 2 and {r.shape for r in recs} == {"[[321271]]", "[[2082411]]"}
    r = next(r for r in recs if r.shape == "[[321271]]")
    assert (r.calls, r.index, r.ms, r.median_ms) == (6, 4, 350.0, 150.0)
    assert r.period_ms == pytest.approx((ev[4]["ts"] - ev[3]["ts"]) / 1000) == pytest.approx(400.0)
    assert r.median_period_ms == pytest.approx(200.0) and not r.in_steps and r.with_it == 1
    # the steps tell where there are enough of them: nothing read from the collectives then
    assert collective_repeats(t, wins * 4) == []


B2 = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real" / "kineto" / "samples" / \
    "resnet50_num_workers_4"


@pytest.mark.skipif(not B2.exists(), reason="real fixtures not present")
def test_real_resnet_capture_one_step_9():
    """kineto resnet50_num_workers_4, its first capture (`--run 1`): step 9 runs every host op slower (the expert's
    "host jitter step #9 (+40 ms)"). aten::batch_norm's summed time on the main thread in each host ProfilerStep,
    read with plain gzip/json, against the record."""
    path = next(p for p in sorted(B2.iterdir()) if "1623212756351" in p.name)
    ev = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = {int(e["name"].split("#")[1]): e for e in ev if e["name"].startswith("ProfilerStep#")}
    main = steps[9]["tid"]

    def bn(n: int) -> float:
        s = steps[n]
        return sum(e["dur"] for e in ev if e["name"] == "aten::batch_norm" and e["tid"] == main
                   and s["ts"] <= e["ts"] < s["ts"] + s["dur"]) / 1000

    typical = sorted(bn(n) for n in (6, 7, 8, 10))
    a = analyze_path(str(B2), run=1)
    r = a.ranks[0]
    assert [o.step for o in r.outlier_ops] == [9]
    g = next(g for g in r.outlier_ops[0].ops if g.op == "aten::batch_norm")
    assert g.ms == pytest.approx(bn(9), abs=1e-3)
    assert g.median_ms == pytest.approx((typical[1] + typical[2]) / 2, abs=1e-3)
    f = next(f for f in a.findings if f.id == "outlier_steps")
    assert f.evidence.steps == [9] and "the host (cpu_bound) grew the most" in f.evidence.text
    assert "spread over" in f.evidence.text


def test_rule_names_the_peer_the_job_path_waited_on(job):
    """The job's path in the outlier step waiting on rank 2 (set on the summary): the finding names that rank."""
    a = analyze_path(str(job[0]))
    for r in a.ranks:  # communication grew in step 13, as in the test above
        s = next(s for s in r.steps if s.step == SLOW_STEP)
        cp = s.critical_path
        cp.gpu_communication_bound += cp.cpu_bound
        cp.cpu_bound = 0.0
    ps = next(p for p in a.critical_path.per_step if p.step == SLOW_STEP)
    ps.waiting_on = {"2": 30.0}
    ps.waiting_on_rank = 100 * 30.0 / ps.length_ms
    f = _rerun(a)
    assert "waited 30.00 ms on rank 2" in f[0].evidence.text and "a late peer" in f[0].evidence.text
