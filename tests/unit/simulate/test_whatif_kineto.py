"""The what-if simulation on generated multi-rank GPU pipeline traces (tests/gen/pipeline.py), against the
generator's own schedule simulation: the job as traced, and the ideal job (every F and B at the mean cost
over stages, every transfer at its latency) simulated by the generator, not by the analyzer."""

from __future__ import annotations

import dataclasses
import os

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.pipeline import Case, simulate, write

CASES = [
    Case(p=4, m=8, slow_stage=3, lat_us=30, steps=3),
    Case(p=4, m=4, slow_stage=1, slow_factor=3, lat_us=50, steps=2, optimizer_us=0),
    Case(p=2, m=4, schedule="gpipe", steps=2),
    Case(p=3, m=6, slow_stage=0, lat_us=10, steps=2, split_kernels=3),
]


def _ideal(c: Case) -> Case:
    """Every stage at the mean cost over stages (the study's ideal for compute: the mean per op type)."""
    k = (c.p - 1 + (c.slow_factor if c.slow_stage is not None else 1)) / c.p
    return dataclasses.replace(c, f_us=c.f_us * k, b_us=c.b_us * k, slow_stage=None)


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"p{c.p}m{c.m}{c.schedule}-slow{c.slow_stage}-lat{c.lat_us}")
def test_slowdown_against_the_generator(tmp_path, c):
    write(c, tmp_path)
    w = analyze_path(str(tmp_path), jobs=1, rules=False).whatif
    assert w is not None and not w.missing
    traced_us = simulate(c).window_us + c.allreduce_us  # launch delays removed: the all-reduce right after the last action
    ideal_us = simulate(_ideal(c)).window_us + c.allreduce_us
    assert w.no_delay_step_ms == pytest.approx(traced_us / 1e3, rel=1e-6)
    assert w.ideal_step_ms == pytest.approx(ideal_us / 1e3, rel=1e-6)
    assert w.slowdown == pytest.approx(traced_us / ideal_us, rel=1e-6)
    print(f"{c.p=} {c.m=} {c.schedule}: simulated {w.simulated_step_ms:.3f} ms, no-delay {w.no_delay_step_ms:.3f} ms, "
          f"measured {w.measured_step_ms:.3f} ms ({w.sim_error:+.2%})")
    assert abs(w.sim_error) <= 0.03
    assert abs(w.no_delay_step_ms / w.measured_step_ms - 1) <= 0.03
    if c.slow_stage is not None:
        st = {x.key: x.slowdown for x in w.by("stage")}
        assert max(st, key=st.get) == str(c.slow_stage)
        assert w.mw_ranks == [c.rank(c.slow_stage)]
    else:
        assert w.slowdown == pytest.approx(1.0, abs=1e-9)


def test_missing_rank_gives_no_partial_answer(tmp_path):
    write(CASES[0], tmp_path)
    os.remove(tmp_path / "rank2.pt.trace.json.gz")
    a = analyze_path(str(tmp_path), jobs=1, rules=False)
    assert a.ranks_missing == [2]
    assert a.whatif.slowdown is None and a.whatif.contributions == []
    assert "ranks without a trace: 2" in a.whatif.missing[0]


def test_no_pipeline_no_section(tmp_path):
    from tests.gen.scenario_traces import straggler

    straggler(tmp_path, 3000)
    assert analyze_path(str(tmp_path), jobs=1, rules=False).whatif is None


def test_findings_take_their_gain_from_the_replay(tmp_path):
    """pipeline_imbalance: "if stage 2 ran at the mean stage's speed" = the generator's own schedule with stage
    2's F and B at the mean over stages, (3 + 1.6) / 4 of the others'."""
    from tests.gen.planted import Planted

    c = Planted(p=4, m=8, slow_stage=2, slow_factor=1.6, lat_us=30, steps=2)
    write(c, tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    f = next(f for f in a.findings if f.id == "pipeline_imbalance")
    balanced = dataclasses.replace(c, slow_factor=(3 + 1.6) / 4)
    expected_ms = (simulate(c).window_us - simulate(balanced).window_us) / 1e3
    assert f.gain_kind == "estimate" and f.gain_ms == pytest.approx(expected_ms, rel=1e-6)
    assert "if stage 2 ran at the mean stage's speed" in f.expected_gain


def test_without_peer_records_the_schedule_edges_are_assumed_and_said(tmp_path, monkeypatch):
    """Traces whose send/recv carry no peers (gloo): forward after the previous stage's forward, backward after
    the next stage's backward; transfers fold into launch delays, so the no-delay and ideal replays are the
    generator's schedule with free communication. The section says so."""
    import llmdiag.diagnose.analyze as an

    real = an.kineto_whatif
    monkeypatch.setattr(an, "kineto_whatif",
                        lambda job: real(dataclasses.replace(job, ranks=[dataclasses.replace(o, p2p=[])
                                                                         for o in job.ranks])))
    c = CASES[0]
    write(c, tmp_path)
    w = analyze_path(str(tmp_path), jobs=1, rules=False).whatif
    assert not w.missing and "no send/recv with peers" in w.assumed[0]
    free = dataclasses.replace(c, lat_us=0)
    assert w.no_delay_step_ms == pytest.approx((simulate(free).window_us + c.allreduce_us) / 1e3, rel=1e-6)
    assert w.ideal_step_ms == pytest.approx((simulate(_ideal(free)).window_us + c.allreduce_us) / 1e3, rel=1e-6)
    assert abs(w.sim_error) <= 0.03
