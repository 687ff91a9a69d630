"""The pipeline prediction's cost model (diagnose.simulate.predict, diagnose.metrics.action_costs) against
answers computed by hand: message nodes on the cross-stage edges, the per-action fixed host time read from
the ops, the per-link fit, the per-action host overhead."""

from __future__ import annotations

import numpy as np
import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.simulate.predict import CostModel, _latency_bandwidth, fit
from llmdiag.diagnose.simulate.replay import predict, replay
from tests.gen.builder import MAIN_TID, TraceBuilder

MS = 1_000_000  # ns


@pytest.mark.parametrize("m", [1, 2, 5])
def test_gpipe_with_a_message_per_edge_adds_one_message_each_way(m):
    """Two stages, F = f and B = b everywhere, a message of L on each cross-stage edge that starts once both
    sides posted (the receiver posts its recv when its previous action ends): stage 1's i-th forward starts
    after its (i−1)-th ends plus L, so its forwards end at (m+1)f + mL; the backwards to stage 0 likewise add
    L each: makespan (m+1)(f+b) + 2mL. The same rendezvous as tests/gen/pipeline.py's transfers."""
    f, b, lat = 3.0, 5.0, 0.7
    cost = {(0, "F"): f, (1, "F"): f, (0, "B"): b, (1, "B"): b}
    rep = predict("gpipe", 2, m, cost, link_ms={(0, 1): lat, (1, 0): lat})
    assert rep.makespan == pytest.approx((m + 1) * (f + b) + 2 * m * lat)
    free = predict("gpipe", 2, m, cost)
    assert free.makespan == pytest.approx((m + 1) * (f + b))
    assert rep.busy == free.busy  # a message occupies no rank


def test_message_only_on_its_own_link():
    """A message on 0→1 only (forward activations) delays stage 1's forwards, not the backward edge."""
    orders = {0: [(0, "F", 0), (0, "B", 0)], 1: [(1, "F", 0), (1, "B", 0)]}
    dur = {k: 1.0 for o in orders.values() for k in o}
    rep = replay(orders, dur, 1, {(0, 1): 2.0})
    assert rep.makespan == pytest.approx(1 + 2 + 1 + 1 + 1)


def test_latency_and_bandwidth_from_two_sizes_and_latency_alone_from_one():
    import numpy as np

    b = np.array([1e6, 1e6, 4e6, 4e6])
    y = 0.5 + b * 2e-7  # 0.5 ms + 5 MB/ms
    lat, per_b = _latency_bandwidth(b, y)
    assert lat == pytest.approx(0.5) and per_b == pytest.approx(2e-7)
    lat, per_b = _latency_bandwidth(np.array([1e6] * 3), np.array([1.0, 3.0, 2.0]))
    assert (lat, per_b) == (2.0, 0.0)  # one size: the median transfer, all of it latency


def test_durations_keep_fixed_and_scale_variable():
    cm = CostModel({(0, "F"): 2.0}, {(0, "F"): 8.0}, {(0, "F"): 1.0}, {(0, 1): (0.5, 1e-6, 1e6)})
    cost, links = cm.durations(2, 8)
    assert cost[(0, "F")] == pytest.approx(1.0 + 2.0 + 8.0 * 2 / 8)
    assert links[(0, 1)] == pytest.approx(0.5 + 1e-6 * 1e6 * 2 / 8)


def _act(step, stage, kind, mb, s_ms, e_ms):
    return Action(step, stage, kind, mb, int(s_ms * MS), int(e_ms * MS))


def test_fit_reads_fixed_overhead_and_the_link_transfer():
    """Stage 0: F0 [0, 10] (fixed 2 ms), then B0 [30, 40] whose gradient recv completed at 28: overhead
    2 ms. Stage 1: F0 [13, 23] whose activation recv (posted at 5) completed at 12.5: overhead 0.5 ms,
    transfer 12.5 − max(send post 10.2, recv post 5) = 2.3 ms; B0 [23, 27] → recv on 0 posted 1, ends 28:
    transfer 28 − max(27.1, 1) = 0.9 ms. One step, m = 1."""
    acts = {0: [_act(0, 0, "F", 0, 0, 10), _act(0, 0, "B", 0, 30, 40)],
            1: [_act(0, 1, "F", 0, 13, 23), _act(0, 1, "B", 0, 23, 27)]}
    fixed = {0: [2 * MS, 0], 1: [0, MS]}
    host = {0: [("recv", 1 * MS, 28 * MS, 100), ("send", int(10.2 * MS), int(12.6 * MS), 100)],
            1: [("recv", 5 * MS, int(12.5 * MS), 100), ("send", int(27.1 * MS), 28 * MS, 100)]}
    cm = fit(acts, fixed, host, {0: 0, 1: 0}, [0, 1], 1)
    assert cm.fixed == {(0, "F"): 2.0, (0, "B"): 0.0, (1, "F"): 0.0, (1, "B"): 1.0}
    assert cm.variable == {(0, "F"): 8.0, (0, "B"): 10.0, (1, "F"): 10.0, (1, "B"): 3.0}
    assert cm.overhead[(0, "B")] == pytest.approx(2.0)
    assert cm.overhead[(1, "B")] == pytest.approx(0.0)  # B after its own F, input already there
    assert cm.links[(0, 1)] == pytest.approx((2.3, 0.0, 100.0))
    assert cm.links[(1, 0)] == pytest.approx((0.9, 0.0, 100.0))


def test_fixed_host_time_and_gloo_records_from_a_trace(tmp_path):
    """One action of 1000 µs: mm 400, view 10 (leaf), transpose 30 holding as_strided 10, add 200.
    Uncovered 1000 − 640 = 360; data-free ops 10 + 30 = 40; dispatch = median leaf view-like op (10 µs) ×
    2 other ops (mm, add) = 20: fixed 420 µs. The send is posted by c10d::send at 1100 and completes at
    1405, 2 × 3 floats = 24 bytes."""
    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    b.thread_name(MAIN_TID, "pt_main_thread")
    b.step(1, 0, 2000)
    b.pp(0, "F", 0, 100, 1100)
    b.cpu_op("aten::mm", 150, 400)
    b.cpu_op("aten::view", 600, 10)
    b.cpu_op("aten::transpose", 700, 30)
    b.cpu_op("aten::as_strided", 705, 10)
    b.cpu_op("aten::add", 800, 200)
    b.cpu_op("c10d::send", 1100, 5)
    b.gloo("send", 1105, 300, dims=[2, 3])
    out = run_job(RankJob(b.write(str(tmp_path / "rank0.json")), None, False, 0))
    assert out.error is None and len(out.actions) == 1
    assert out.action_fixed_ns == [420_000]
    assert [(k, e - s, n) for k, s, e, n in out.host_p2p] == [("send", 305_000, 24)]


def test_moving_one_layer_off_the_slowest_stage_by_the_closed_form():
    """GPipe, 2 stages of 3 layers, m = 4, free communication: stage 0 F 3 B 6, stage 1 F 6 B 12. With the
    later stage at least as slow in F and B the step is a + b + m(c + d) = 9 + 4·18 = 81. One layer of
    stage 1 (F 2, B 4) moved to stage 0: stage 0 F 5 B 10, stage 1 F 4 B 8, now the earlier stage is the
    slower: stage 1's last F ends at 5m + 4, its first B at 5m + 12, stage 0's backwards then run back to
    back: 15m + 12 = 72. Gain 9."""
    from llmdiag.diagnose.simulate.layers import move_one_layer

    var = {(0, "F"): 3.0, (0, "B"): 6.0, (1, "F"): 6.0, (1, "B"): 12.0}
    mv = move_one_layer(CostModel({k: 0.0 for k in var}, var, {}), predict, "gpipe", 2, 4, [3, 3])
    assert (mv.src, mv.dst) == (1, 0)
    assert mv.step_ms == pytest.approx(72.0) and mv.gain_ms == pytest.approx(9.0)
    assert move_one_layer(CostModel({}, var, {}), predict, "gpipe", 2, 4, [3, 1]) is None  # one layer: none to move


def test_layers_per_stage_from_the_manifest():
    from llmdiag.diagnose.model.manifest import Manifest, PipelineConfig
    from llmdiag.diagnose.simulate.layers import stage_layers

    from llmdiag.workloads.grammar import Pipeline

    for layers, p in ((8, 3), (4, 2), (7, 4), (2, 2)):
        man = Manifest(pipeline=PipelineConfig(stages=p, stages_per_rank=1), model={"layers": layers})
        plan = Pipeline("1f1b", 4, p, 1, layers)  # the split the workload runs
        assert stage_layers(man) == [len(plan.layers_of(s)) for s in range(p)]
    assert stage_layers(Manifest(pipeline=PipelineConfig(stages=2, stages_per_rank=2), model={"layers": 8})) is None
    assert stage_layers(None) is None


@pytest.mark.parametrize("p,m,schedule,lat", [(4, 8, "1f1b", 30), (4, 8, "1f1b", 200), (3, 6, "gpipe", 100)])
def test_generated_gpu_pipeline_predicted_by_the_generators_own_schedule(tmp_path, p, m, schedule, lat):
    """tests/gen/pipeline.py simulates its schedule from the definition (transfers of lat_us once both sides
    posted). The model fitted from its trace replays the trace's own setting exactly, and m/2 microbatches
    (each twice the work; one message size, so the same latency) as the generator's own m/2 job."""
    import dataclasses

    from llmdiag.diagnose.analyze import analyze_path
    from tests.gen.pipeline import Case, simulate, write

    c = Case(p=p, m=m, schedule=schedule, lat_us=lat, steps=2)
    write(c, tmp_path)
    res = analyze_path(str(tmp_path), jobs=1, rules=False).pipeline
    assert res.prediction_error == pytest.approx(0.0, abs=1e-9)
    half = dataclasses.replace(c, m=m // 2, f_us=2 * c.f_us, b_us=2 * c.b_us)
    rows = {(x.schedule, x.microbatches): x for x in res.predictions}
    q = rows[(schedule, m // 2)]
    assert q.step_ms == pytest.approx(simulate(half).window_us / 1e3, rel=1e-9)
    # the busiest stage's work per step, as the generator's own schedule has it, at m and at m/2
    for case, x in ((c, rows[(schedule, m)]), (half, q)):
        assert x.busy_ms == pytest.approx(max(simulate(case).busy_us.values()) / 1e3, rel=1e-9)


def test_gpu_action_fixed_time_is_its_launch_gaps(tmp_path):
    """tests/gen/pipeline.py with 4 kernels per action leaves 2 µs between them: 6 µs per action not covered
    by a kernel (all of it in the kernels: 0, the 2-kernel default)."""
    from tests.gen.pipeline import Case, write

    for kernels, gaps in ((4, 6_000), (2, 0)):
        d = tmp_path / str(kernels)
        d.mkdir()
        write(Case(p=2, m=2, lat_us=30, steps=2, split_kernels=kernels), d)
        out = run_job(RankJob(str(d / "rank0.pt.trace.json.gz"), None, False, 0))
        assert out.error is None and len(out.actions) == 8
        assert out.action_fixed_ns == [gaps] * 8


def test_replay_with_spread_is_the_mean_over_varying_actions(monkeypatch):
    """Stage 0 runs F0, F1 (1 ms each, each ±a at random), stage 1 runs F0, F1 (1 ms, fixed). Stage 1's F1
    starts at max(its F0's end, stage 0's F1's end) = 2 + x0 + max(0, x1): the step ends at 3 + x0 + max(0, x1),
    whose mean is 3 + a/2 (x0, x1 = ±a equally likely), where the replay at mean durations says 3."""
    from llmdiag.diagnose.simulate import replay as R

    monkeypatch.setattr(R, "SAMPLES", 40_000)
    a = 0.5
    orders = {0: [(0, "F", 0), (0, "F", 1)], 1: [(1, "F", 0), (1, "F", 1)]}
    dur = {k: 1.0 for o in orders.values() for k in o}
    assert R.replay(orders, dur, 1).makespan == pytest.approx(3.0)
    dev = np.array([-a, a])
    got = R.replay(orders, dur, 1, spread={(0, "F", 0): dev, (0, "F", 1): dev}).makespan
    assert got == pytest.approx(3 + a / 2, abs=0.02)
    assert R.replay(orders, dur, 1, spread={(0, "F", 0): np.zeros(4)}).makespan == pytest.approx(3.0)


def test_spread_is_what_neither_step_nor_microbatch_explains():
    """Durations over 2 steps × 2 microbatches [[10, 14], [12, 20]] ms: step means 12 and 16, microbatch
    means 11 and 17, mean 14; deviations d − step − microbatch + mean = [[1, −1], [−1, 1]]. A table with one
    step (nothing to separate) gives none."""
    from llmdiag.diagnose.simulate.predict import _spread

    ms = 1_000_000
    acts = {0: [Action(st, 0, "F", mb, 0, d * ms) for (st, mb), d in
                {(1, 0): 10, (1, 1): 14, (2, 0): 12, (2, 1): 20}.items()]}
    got = _spread(acts, [0])
    assert sorted(got[(0, "F")].tolist()) == pytest.approx([-1, -1, 1, 1])
    assert _spread({0: [Action(1, 0, "F", mb, 0, 5 * ms) for mb in range(3)]}, [0]) == {}
