"""The optimizer_step rule (diagnose/rules/optimizer.py) on generated summaries: its floor, its action per
optimizer, and its gain counted once with host_bound's and host_op_stall's (diagnose/rules/shared_time.py). The
expected numbers are the placed ones, added up here by hand."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.rules import findings as run_rules
from llmdiag.diagnose.rules.overlaps import counted_gain_ms
from tests.gen.summaries import host_idle, typed
from tests.gen.summaries import stretch as _stretch

STEPS = 3
OPT = ["Optimizer.step#SGD.step", "## optimizer ##"]


def _job(opt_idle_ms: float, name: str = "SGD", kernels: float = 400.0, median_us: float = 3.0,
         multi: bool = False, stretches: list | None = None, host_bound_ms: float = 50.0, idle_frac: float = 0.6,
         sampled: bool = False, impl: str = "per_param", cpu_bound: float | None = None) -> dict:
    """2 ranks of ~100 ms steps, each with `opt_idle_ms` of device idle per step inside its optimizer step; where
    `cpu_bound` is given, a critical path of the step's length with that share (%) held by the host."""
    s = host_idle(2, idle_frac, host_bound_ms, stretches)
    for r in s["ranks"]:
        r["optimizer"] = {"op": f"Optimizer.step#{name}.step", "name": name, "steps": STEPS,
                          "host_ms": opt_idle_ms + 1.0, "idle_ms": opt_idle_ms, "kernels": kernels,
                          "kernel_ms": kernels * median_us / 1000, "kernel_median_us": median_us,
                          "multi_tensor": multi, "sampled": sampled, "impl": impl,
                          "foreach_ops": 3.0 if impl == "foreach" else 0.0}
        if cpu_bound is not None:
            r["critical_path"] = {"length_ms": r["step_time_ms"], "cpu_bound": cpu_bound,
                                  "gpu_compute_bound": 100.0 - cpu_bound,
                                  "gpu_communication_bound": 0.0, "gpu_kernel_launch_overhead": 0.0,
                                  "gpu_kernel_kernel_overhead": 0.0}
    return s


def test_per_parameter_sgd_fires_with_foreach_and_counts_its_idle_once():
    """Per step: 50 ms of host-bound idle; the optimizer's span holds 20 ms of it, 6 ms of those in a long
    `aten::_foreach_add_` under it (host_op_stall's). host_bound keeps 50 - 6 = 44; optimizer_step's 20 = the
    6 ms stretch + 14 ms of host-bound rest: 14 shared with host_bound, so it adds 6; host_op_stall's 6 is wholly
    the optimizer's. Counted: 44 + 6 = 50, each ms once."""
    st = [_stretch(i, "aten::_foreach_add_", 6.0, OPT) for i in range(STEPS)]
    by = {f.id: f for f in run_rules(typed(_job(20.0, stretches=st)))}
    hb, op, hs = by["host_bound"], by["optimizer_step"], by["host_op_stall"]
    assert (hb.gain_ms, op.gain_ms, hs.gain_ms) == pytest.approx((44.0, 20.0, 6.0))
    assert op.gain_kind == "bound" and op.severity == "high"
    assert "foreach=True" in op.action and "SGD" in op.title
    assert op.shared_ms == pytest.approx(14.0) and op.part_of is None
    assert hs.part_of == "optimizer_step"
    assert counted_gain_ms(list(by.values())) == pytest.approx(50.0)


def test_below_the_floor_is_silent():
    """4 ms of idle in a ~100 ms step: under 5 % (and 4 / 60 ms of the rank's idle)."""
    assert "optimizer_step" not in {f.id for f in run_rules(typed(_job(4.0)))}


def test_a_host_slow_throughout_needs_a_named_switch():
    """8 ms of idle in the optimizer (8 % of the step) but the rank idles 80 ms per step, all host-bound: the
    optimizer holds 10 % of it, its ops' share of a uniformly slow host. A multi-tensor optimizer with no named
    switch (RMSprop: no `fused=True`) is silent there, host_bound names the cause; at 13 ms (16 % of the idle) it
    fires. A per-parameter loop (`foreach=True`) or foreach SGD (`fused=True`) fires at 8 ms: the switch cuts its
    op count whatever the host's speed."""
    slow = dict(host_bound_ms=80.0, idle_frac=0.8)
    other = dict(name="RMSprop", kernels=9.0, median_us=70.0, multi=True, impl="foreach")
    assert "optimizer_step" not in {f.id for f in run_rules(typed(_job(8.0, **slow, **other)))}
    assert "optimizer_step" in {f.id for f in run_rules(typed(_job(13.0, **slow, **other)))}
    per_param = {f.id: f for f in run_rules(typed(_job(8.0, **slow)))}
    assert "foreach=True" in per_param["optimizer_step"].action
    fe = {f.id: f for f in run_rules(typed(_job(8.0, **slow, **dict(other, name="SGD"))))}["optimizer_step"]
    assert "SGD(..., fused=True)" in fe.action and "3.0 `_foreach_*` ops" in fe.evidence.text
    assert fe.gain_ms == pytest.approx(8.0) and fe.gain_kind == "bound"


def test_an_optimizer_already_fused_is_silent():
    """The same 20 ms of idle, the step already fused (`aten::_fused_sgd_`): no switch left for this rule."""
    assert "optimizer_step" not in {f.id for f in run_rules(typed(_job(20.0, kernels=2.0, median_us=300.0, multi=True,
                                                                        impl="fused")))}


def test_the_host_must_hold_the_idle_on_the_path():
    """20 ms of idle inside the span, but the rank's critical path (100 ms) holds only 15 % (15 ms) of host time:
    the device's idle there is not what sets the step; 25 % (25 ms) holds it, and the evidence says so."""
    assert "optimizer_step" not in {f.id for f in run_rules(typed(_job(20.0, cpu_bound=15.0)))}
    f = {f.id: f for f in run_rules(typed(_job(20.0, cpu_bound=25.0)))}["optimizer_step"]
    assert "the host holds 25.00 ms of the rank's" in f.evidence.text


def test_shampoo_on_a_sample_names_its_knobs_and_the_sample():
    by = {f.id: f for f in run_rules(typed(_job(15.0, name="Shampoo", kernels=30.0, median_us=17.0, multi=True,
                                                sampled=True)))}
    f = by["optimizer_step"]
    assert "precondition_frequency" in f.action and "foreach=True" not in f.action
    assert "event-sampled" in f.evidence.text and "from a sample" in f.expected_gain
    assert f.gain_ms == pytest.approx(15.0)


def test_already_multi_tensor_gets_no_foreach_advice():
    f = {f.id: f for f in run_rules(typed(_job(15.0, name="AdamW", kernels=8.0, median_us=300.0, multi=True)))}
    assert "foreach=True" not in f["optimizer_step"].action
