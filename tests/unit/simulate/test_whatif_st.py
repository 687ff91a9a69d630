"""The what-if analysis of the straggler study's ST job (dp2 × pp4 Megatron-LM, last stage too long) against
the values the study published with its artifact (result-ST.json, ms-ST.json, mw-ST.json): each within 1 %."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmdiag.diagnose.io.megatron_ops import read_op_table
from llmdiag.diagnose.simulate.artifact import whatif_of_table

pytestmark = pytest.mark.real
BYTEDANCE = (Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "real" / "bytedance").resolve()
TOL = 0.01


@pytest.fixture(scope="module")
def st():
    return whatif_of_table(read_op_table(str(BYTEDANCE / "trace-ST.parquet")))


@pytest.fixture(scope="module")
def published():
    res = json.loads((BYTEDANCE / "result-ST.json").read_text())
    res["ms"] = json.loads((BYTEDANCE / "ms-ST.json").read_text())
    res["mw"] = json.loads((BYTEDANCE / "mw-ST.json").read_text())
    return res


def test_slowdown_and_launch_slowdown(st, published):
    assert not st.missing
    assert st.slowdown == pytest.approx(published["blocking_slowdown"], rel=TOL)
    assert st.slowdown == pytest.approx(1.1787, rel=TOL)
    assert st.launch_slowdown == pytest.approx(published["launch_slowdown"], rel=TOL)
    assert st.launch_slowdown == pytest.approx(1.0192, rel=TOL)


def test_step_times(st, published):
    mean = lambda d: sum(d.values()) / len(d)
    assert st.steps == len(published["step_t_base"]) == 32
    assert st.measured_step_ms == pytest.approx(mean(published["step_t_base"]) * 1e3, rel=TOL)
    assert st.no_delay_step_ms == pytest.approx(mean(published["step_t_nodelay"]) * 1e3, rel=TOL)
    assert st.ideal_step_ms == pytest.approx(mean(published["step_t_noblk"]) * 1e3, rel=TOL)
    print(f"ST: simulated step {st.simulated_step_ms:.2f} ms vs measured {st.measured_step_ms:.2f} ms "
          f"({st.sim_error:+.3%})")
    assert abs(st.sim_error) <= 0.03
    # the replay without launch delays (nothing taken from the measured start times) is within 3 % too
    assert abs(st.no_delay_step_ms / st.measured_step_ms - 1) <= 0.03


def test_per_step_slowdown(st, published):
    for step, s in published["blocking_step_slowdown"].items():
        assert st.per_step[step] == pytest.approx(s, rel=TOL), step


@pytest.mark.parametrize("group,key", [("stage", "blocking_decompose_by_stage"),
                                       ("optype", "blocking_decompose_by_optype"),
                                       ("dp_rank", "blocking_decompose_by_dp_rank")])
def test_decomposition(st, published, group, key):
    ours = {c.key: c.slowdown for c in st.by(group)}
    theirs = published[key]
    assert set(ours) == set(theirs)
    for k, v in theirs.items():
        assert ours[k] == pytest.approx(v, rel=TOL), (group, k)


def test_named_values_from_the_issue(st):
    by = {(c.group, c.key): c.slowdown for c in st.contributions}
    assert by[("stage", "3")] == pytest.approx(1.2323, rel=TOL)
    assert all(0.98 * (1 - TOL) <= by[("stage", s)] <= 1.00 * (1 + TOL) for s in "012")
    assert by[("optype", "forward-compute")] == pytest.approx(1.0875, rel=TOL)
    assert by[("optype", "backward-compute")] == pytest.approx(1.0742, rel=TOL)
    assert [(c.group, c.key) for c in st.top(3)] == [("stage", "3"), ("dp_rank", "1"), ("dp_rank", "0")]


def test_ms_and_mw(st, published):
    assert st.ms == pytest.approx(published["ms"]["Ms"], rel=TOL)
    assert st.ms == pytest.approx(1.2194, rel=TOL)
    assert st.mw == pytest.approx(published["mw"]["Mw"], rel=TOL)
    assert st.mw == pytest.approx(0.0314, rel=TOL)
    assert st.mw_ranks == [7]  # dp rank 1 of the last stage
    # "if worker 7 ran at its peers' speed" is exactly M_W's replay: M_W × (traced − ideal)
    g = st.worker_gains[0]
    assert g.rank == 7 and g.gain_ms == pytest.approx(st.mw * (st.no_delay_step_ms - st.ideal_step_ms), rel=1e-9)
    assert g.optype == "backward-compute"


def test_pipeline_per_stage(st):
    """The last stage carries the output layer and loss: the most compute, the smallest bubble."""
    assert [s.stage for s in st.stages] == [0, 1, 2, 3]
    last = st.stages[-1]
    assert last.compute_ms == max(s.compute_ms for s in st.stages)
    assert last.bubble == min(s.bubble for s in st.stages)
    assert 0 < st.imbalance < 1


def test_straggler_gain_text(st):
    from llmdiag.diagnose.simulate.gains import simulated_stage_gain, simulated_straggler_gain, straggler_of

    gain, how = simulated_straggler_gain(st, [7, 3], st.measured_step_ms)
    assert gain == pytest.approx(st.worker_gains[0].gain_ms)
    assert how.startswith("if rank 7 ran at its peers' speed: step 2,204.10 ms (−0.5%), most of it in backward-compute")
    assert straggler_of(st) is None  # 0.5 % of the step: the stage split, not a worker, as M_W says
    gain, how = simulated_stage_gain(st, 3, st.measured_step_ms)
    assert gain == pytest.approx(st.ms * (st.no_delay_step_ms - st.ideal_step_ms), rel=1e-9)  # M_S's replay


def test_replay_budget_leaves_out_and_says_so(monkeypatch):
    """A job too large for the replay budget keeps S and what fits, and names every decomposition left out."""
    import llmdiag.diagnose.simulate.whatif as wi

    t = read_op_table(str(BYTEDANCE / "trace-ST.parquet"))
    monkeypatch.setattr(wi, "REPLAY_BUDGET", t.n * 20)  # the 4 headline replays + 11 op types + 4 stages fit
    w = whatif_of_table(t)
    assert w.slowdown == pytest.approx(1.1787, rel=0.01)
    assert {c.group for c in w.contributions} == {"optype", "stage"}
    assert w.left_out == ["the decomposition by dp_rank (2 replays of 6,784 ops)",
                          "M_S, M_W and the per-worker and per-stage gains"]
    assert w.ms is None and w.worker_gains == []
