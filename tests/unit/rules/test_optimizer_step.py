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
         sampled: bool = False) -> dict:
    """2 ranks of ~100 ms steps, each with `opt_idle_ms` of device idle per step inside its optimizer step."""
    s = host_idle(2, idle_frac, host_bound_ms, stretches)
    for r in s["ranks"]:
        r["optimizer"] = {"op": f"Optimizer.step#{name}.step", "name": name, "steps": STEPS,
                          "host_ms": opt_idle_ms + 1.0, "idle_ms": opt_idle_ms, "kernels": kernels,
                          "kernel_ms": kernels * median_us / 1000, "kernel_median_us": median_us,
                          "multi_tensor": multi, "sampled": sampled}
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


def test_a_host_slow_throughout_is_silent():
    """8 ms of idle in the optimizer (8 % of the step) but the rank idles 80 ms per step, all host-bound: the
    optimizer holds 10 % of it, its ops' share of a uniformly slow host (host_bound names it). 13 ms: 16 %, fires."""
    assert "optimizer_step" not in {f.id for f in run_rules(typed(_job(8.0, host_bound_ms=80.0, idle_frac=0.8)))}
    assert "optimizer_step" in {f.id for f in run_rules(typed(_job(13.0, host_bound_ms=80.0, idle_frac=0.8)))}


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
