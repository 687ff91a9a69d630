"""The analyzer on llmdiag's own CPU runs: the metrics must move when reality moves.

Two ranks only where a timing is asserted: more ranks than the 2 cores would contaminate timings.
Pipeline: the bubble of gpipe and 1f1b falls as microbatches grow, tracks the dependency-graph replay of
the same run, and the formula is reported beside it. DDP: gradient all-reduce overlaps backward with
small buckets, and the overlap collapses with one huge bucket (reduced only after backward).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import os
import subprocess
import sys

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.pipeline.actions import theory_bubble

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Measured − replay on this 2-core machine stays within this: p2p waits and host overhead between
# actions of a tiny model are a large share of its step; both ranks share 2 cores with their gloo threads.
REPLAY_TOLERANCE = 0.2
# A model just big enough that a microbatch's compute outweighs the per-action p2p overhead: with the tiny
# default, measured bubbles are dominated by gloo send/recv latency and stop tracking the schedule.
PP_MODEL = ("--hidden", "256", "--seq-len", "128", "--batch", "16")


def run_workload(out: str, workload: str, *args: str) -> str:
    cmd = [sys.executable, "-m", "llmdiag.diagnose.cli.main", "run", "--workload", workload, "--out", out, *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def pp_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("pp")
    runs = {}
    for schedule in ("gpipe", "1f1b"):
        for m in (2, 4, 8):
            out = str(base / f"{schedule}-m{m}")
            runs[(schedule, m)] = analyze_path(
                run_workload(out, "pp2", "--schedule", schedule, "--microbatches", str(m), "--profile-steps", "1,1,5",
                             *PP_MODEL),
                rules=False, jobs=1)
    return runs


def replay_bounds(analysis, m: int, p: int = 2) -> tuple[float, float]:
    """Bounds on the replayed mean bubble, independent of the engine. The replay runs each (stage, kind,
    microbatch) at its mean over the profiled steps, with free communication. Gpipe and 1f1b with every F
    taking F and every B taking B end at (m + p − 1)(F + B), and a longest path only grows with its
    durations: the makespan lies between that at the shortest and at the longest mean action of each kind,
    and the mean bubble, 1 − busy / (p · makespan), between the two."""
    durs = defaultdict(list)
    for r in analysis.ranks:
        for x in r.pipeline_actions:
            durs[(x.stage, x.kind, x.microbatch)].append(x.end_ms - x.start_ms)
    mean = {k: sum(v) / len(v) for k, v in durs.items()}
    busy = sum(mean.values())
    lo = {k: min(d for (_, kind, _), d in mean.items() if kind == k) for k in "FB"}
    hi = {k: max(d for (_, kind, _), d in mean.items() if kind == k) for k in "FB"}
    t_low, t_high = (m + p - 1) * (lo["F"] + lo["B"]), (m + p - 1) * (hi["F"] + hi["B"])
    return 1 - busy / (p * t_low), 1 - busy / (p * t_high)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_bubble_falls_with_microbatches_and_tracks_replay(pp_runs, schedule):
    res = {m: pp_runs[(schedule, m)].pipeline for m in (2, 4, 8)}
    for m, p in res.items():
        assert p is not None, f"no pipeline found in the {schedule} m={m} run"
        assert p.schedule == schedule and p.microbatches == m and p.stages == 2
        assert p.theory == pytest.approx(theory_bubble(schedule, 2, m))
        assert {b.stage for b in p.stage_bubbles} == {0, 1}
        assert p.replay is not None
        low, high = replay_bounds(pp_runs[(schedule, m)], m)
        assert low - 1e-9 <= p.replay <= high + 1e-9, (m, low, p.replay, high)
        if high - low < 0.08:  # uniform actions (no hiccup on the shared cores): the replay is the formula
            assert abs(p.replay - p.theory) < 0.08, (m, p.replay, p.theory)
        assert abs(p.measured - p.replay) < REPLAY_TOLERANCE, (m, p.measured, p.replay)
        assert p.measured >= p.replay - 0.05, "free communication cannot make the pipeline slower"
        assert p.explanation
    # Each run replays its own measured durations, and those differ between runs on 2 shared cores (CI once:
    # m=2 0.208 below m=4 0.212, both within their bounds): only the ends, 1/3 against 1/9 by the formula, are
    # far enough apart to be ordered. The measured bubble likewise, with a small allowance in between.
    assert res[2].replay > res[8].replay
    assert res[2].measured > res[8].measured
    assert res[4].measured < res[2].measured + 0.03 and res[8].measured < res[4].measured + 0.03


def test_pipeline_predictions_follow_the_formula_direction(pp_runs):
    p = pp_runs[("1f1b", 4)].pipeline
    pred = {(x.schedule, x.microbatches): x for x in p.predictions}
    # The predictions average replays over the run's own action-to-action variation, which other jobs' load on
    # two shared cores inflates, and more variation means more waiting at larger m: once CI (a benchmark beside
    # it) saw m=16 at 0.242 against m=4 at 0.226. The formula's direction is asserted across the wide gap
    # (2 -> 16: theory 0.33 -> 0.06) and, between neighbours, within a margin load has not crossed.
    b = {m: pred[("1f1b", m)].bubble for m in (2, 4, 16)}
    assert b[16] < b[2] and b[4] < b[2] + 0.02 and b[16] < b[4] + 0.05, b
    assert pred[("interleaved1f1b", 4)].theory == pytest.approx(theory_bubble("interleaved1f1b", 2, 4, 2))
    assert pred[("interleaved1f1b", 4)].bubble is not None  # replayed (Megatron's interleaved order)
    assert pred[("zbv", 8)].bubble is None and pred[("zbv", 8)].step_ms is None  # no order: not simulated


def test_pipeline_actions_cover_every_microbatch(pp_runs):
    a = pp_runs[("1f1b", 4)]
    for r in a.ranks:
        kinds = {(x.kind, x.microbatch) for x in r.pipeline_actions}
        assert kinds == {(k, mb) for k in "FB" for mb in range(4)}


@pytest.fixture(scope="module")
def runtime_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("pp-runtime")
    return {s: analyze_path(run_workload(str(base / s), "pp2", "--schedule", s, "--microbatches", "4",
                                         "--profile-steps", "1,1,2", *PP_MODEL), rules=False, jobs=1)
            for s in ("interleaved1f1b", "zbv", "dualpipev")}


@pytest.mark.parametrize("schedule", ["interleaved1f1b", "zbv", "dualpipev"])
def test_runtime_schedules_read_as_compute_only_actions(runtime_runs, schedule):
    """torch's runtime spans include input waits; the workload's nested labels are what the analysis reads:
    one action per stage x microbatch x kind (no doubles), and measured bubbles at or above the replay's."""
    a = runtime_runs[schedule]
    p = a.pipeline
    assert p is not None and p.microbatches == 4 and p.replay is not None
    for r in a.ranks:
        acts = Counter((x.stage, x.kind, x.microbatch) for x in r.pipeline_actions)
        stages = {s for s, _, _ in acts}
        assert len(stages) == 2, stages  # two stages per rank: looped (interleaved) or a V
        assert set(acts.values()) == {2}, "one span per action per profiled step"
        for s in stages:
            for mb in range(4):
                assert acts[(s, "F", mb)] == 2
                full, split = acts[(s, "B", mb)], acts[(s, "I", mb)]
                assert full + split == 2 and acts[(s, "W", mb)] == split, (s, mb, full, split)
    assert p.measured >= p.replay - 0.05, "free communication cannot make the pipeline slower"
    assert abs(p.measured - p.replay) < REPLAY_TOLERANCE, (p.measured, p.replay)


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("ddp")
    small = analyze_path(run_workload(str(base / "small"), "dp2", "--bucket-cap-mb", "0.05"), rules=False, jobs=1)
    huge = analyze_path(run_workload(str(base / "huge"), "dp2", "--bucket-cap-mb", "10000"), rules=False, jobs=1)
    return small, huge


def test_ddp_overlaps_allreduce_with_backward(ddp_runs):
    small, _ = ddp_runs
    for r in small.ranks:
        kinds = {c.kind for c in r.comm_by_kind}
        assert "allreduce" in kinds
        assert r.overlap_ratio is not None and r.overlap_ratio > 0.05, r.overlap_ratio


def test_overlap_drops_when_one_bucket_waits_for_backward(ddp_runs):
    small, huge = ddp_runs
    s = sum(r.overlap_ratio for r in small.ranks) / len(small.ranks)
    h = sum(r.overlap_ratio for r in huge.ranks) / len(huge.ranks)
    assert h < s - 0.05, (s, h)
    assert huge.aggregate.exposed_comm_frac_mean > 0


def test_run_folder_manifest_feeds_the_analysis(ddp_runs):
    small, _ = ddp_runs
    assert small.manifest is not None and small.options.run_folder
    assert small.layout["dp"] == 2
    assert small.aggregate.tokens_per_s and small.aggregate.tokens_per_s > 0
    assert sorted(r.rank for r in small.ranks) == [0, 1] and not small.ranks_missing
