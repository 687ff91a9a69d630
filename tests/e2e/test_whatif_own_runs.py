"""The what-if on llmdiag's own CPU pipeline runs, with a planted straggler (`--inject-slow`) and its silent
twin: the replay names the planted rank and op type, the manifest records the plant, the twin names nobody.
Two ranks on two cores (no oversubscription of timings beyond the gloo threads)."""

from __future__ import annotations

import json
import statistics

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.simulate.gains import straggler_of
from tests.e2e.test_analyze_own_runs import PP_MODEL, run_workload

pytestmark = pytest.mark.slow
ARGS = ("--schedule", "1f1b", "--microbatches", "4", "--profile-steps", "1,1,3", *PP_MODEL)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("inject")
    slow = run_workload(str(base / "slow"), "pp2", *ARGS, "--inject-slow", "rank:0:2:backward")
    twin = run_workload(str(base / "twin"), "pp2", *ARGS)
    return {k: (p, analyze_path(p, jobs=1)) for k, p in (("slow", slow), ("twin", twin))}


def _mean(a, rank: int, kind: str) -> float:
    return statistics.mean(x.end_ms - x.start_ms for x in a.rank(rank).pipeline_actions if x.kind == kind)


def test_plant_is_recorded_and_measured(pair):
    path, a = pair["slow"]
    man = json.loads(open(f"{path}/manifest.json").read())
    assert man["options"]["inject_slow"] == "rank:0:2:backward"
    # ×2 planted on rank 0's backward. Two runs on two shared cores differ by up to 1.4× in level (other jobs'
    # load), so each run's backward is measured against its own forward on the same rank: load moves both, the
    # plant moves only the backward. The band tells ×2 from ×1 and from ×4 and nothing finer.
    ratio = (_mean(a, 0, "B") / _mean(a, 0, "F")) / (_mean(pair["twin"][1], 0, "B") / _mean(pair["twin"][1], 0, "F"))
    assert 1.5 < ratio < 3.0, ratio


def test_silent_twin_names_nobody(pair):
    """In a pp2 job each worker is a stage: with no data-parallel peer, a worker's ideal is its op type's mean
    over both stages, so the heavier stage of the twin (or one noisy on two shared cores: 2.6 % once in CI)
    can clear the 1 % share. What the twin must not show is a gain like the plant's."""
    w = pair["twin"][1].whatif
    g = straggler_of(w)
    planted = straggler_of(pair["slow"][1].whatif)
    # Relative to each run's own step, so the level shift between two runs on shared cores cancels; the plant
    # doubles a quarter of the busy time, noise on a balanced twin stays well under that.
    twin = 0.0 if g is None else g.gain_ms / w.measured_step_ms
    plant = planted.gain_ms / pair["slow"][1].whatif.measured_step_ms
    assert twin < 0.5 * plant, (g, planted)
    print(f"twin: S {w.slowdown:.3f}, no-delay vs measured {w.no_delay_step_ms / w.measured_step_ms - 1:+.2%}")


def test_moving_one_layer_off_the_planted_stage(pair):
    """Rank 0's backward ×2 makes stage 0 the slowest, so the layer would go to stage 1. Whether that helps is
    checked against the bottleneck by hand: the stage costs C0, C1 (F + B per microbatch, measured) with 2
    layers each become C0/2 and C1 + C0/2; the replay gains exactly where max of those is below max(C0, C1).
    With the backward doubled, half of stage 0 is more than stage 1's spare: no gain, and the finding keeps
    silent about it."""
    a = pair["slow"][1]
    mv = a.pipeline.layer_move
    assert mv is not None and (mv["src"], mv["dst"]) == (0, 1), mv
    c = {s: sum(_mean(a, s, k) for k in "FB") for s in (0, 1)}  # rank s holds stage s
    helps = max(c[0] / 2, c[1] + c[0] / 2) < max(c.values())
    assert (mv["gain_ms"] > 0) == helps, (mv, c)
    f = next((f for f in a.findings if f.id == "pipeline_imbalance"), None)
    assert f is None or ("moving one layer" in f.expected_gain) == helps
