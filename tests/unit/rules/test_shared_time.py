"""One piece of device idle is counted once (issue #34): findings whose gains lie in the same idle say so and every
total counts the time once (diagnose/rules/shared_time.py). Generated summaries whose overlap is known by
construction; the expected numbers are the placed ones, added up here by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmdiag.diagnose.rules import findings as run_rules
from llmdiag.diagnose.rules.overlaps import counted_gain_ms
from tests.gen.summaries import host_idle, summary, typed
from tests.gen.summaries import stretch as _stretch

STEPS = 3
DDP = ["DistributedDataParallel.forward", "## forward ##"]
OPT = ["Optimizer.step#SGD.step", "## optimizer ##"]
REAL = (Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "real").resolve()
NCCL = REAL / "hta" / "nccl_data.json.gz"


def _job(idle_frac: float, host_bound_ms: float, stretches: list[dict], buffer_idle_ms: float) -> dict:
    """2 ranks, 3 steps of ~100 ms, 2000 kernels per step; each rank's idle split and long-op stretches as given,
    and DDP's buffer broadcast with `buffer_idle_ms` of device idle per step inside its pack/unpack ops."""
    s = host_idle(2, idle_frac, host_bound_ms, stretches)
    for r in s["ranks"]:
        r["chores"] = {"buffer_bcasts": 2.0, "buffer_elems": "53120 Float", "buffer_host_ms": buffer_idle_ms + 0.5,
                       "buffer_idle_ms": buffer_idle_ms}
    return s


def test_nested_host_op_inside_the_broadcast_and_the_host_bound_idle_counts_once():
    """Per step: 50 ms of host-bound idle; inside it, in every step, a 12 ms `aten::unflatten_dense_tensors` stretch
    under DDP's forward (the buffer broadcast's unpack) and, in one step, a 6 ms `_foreach_add_` in the optimizer
    (2 ms per step). The broadcast's ops hold 16 ms of idle: the 12 ms stretch and 4 ms more of host-bound idle.
    host_bound keeps 50 - 12 - 2 = 36 ms; the broadcast's 16 ms shares 4 ms with it; host_op_stall's 14 ms
    shares its 12 ms unflatten with the broadcast; the total is the 50 ms of host-bound idle, once."""
    st = [_stretch(i, "aten::unflatten_dense_tensors", 12.0, DDP) for i in range(STEPS)]
    st.append(_stretch(1, "aten::_foreach_add_", 6.0, OPT))
    a = typed(_job(0.6, 50.0, st, 16.0))
    by = {f.id: f for f in run_rules(a)}
    hb, bb, hs = by["host_bound"], by["broadcast_buffers"], by["host_op_stall"]
    assert (hb.gain_ms, bb.gain_ms, hs.gain_ms) == pytest.approx((36.0, 16.0, 14.0))
    assert hb.shared_ms == 0 and hb.part_of is None
    assert bb.shared_ms == pytest.approx(4.0) and bb.part_of is None
    assert "4.00 ms is part of the 36.00 ms above (`host_bound`)" in bb.expected_gain
    assert "adds 12.00 ms per step" in bb.expected_gain
    assert hs.shared_ms == pytest.approx(12.0) and hs.part_of is None
    assert "12.00 ms is part of the 16.00 ms above (`broadcast_buffers`)" in hs.expected_gain
    assert "adds 2.00 ms per step" in hs.expected_gain
    assert counted_gain_ms(list(by.values())) == pytest.approx(50.0)  # the host-bound idle, each ms once


def test_a_stretch_wholly_inside_the_broadcast_is_part_of_it():
    """Only the unflatten stretch (12 ms per step), the broadcast's 16 ms around it: host_op_stall's whole gain is
    the broadcast's time, so it is part of it; counted: 36 + 16 - 4 (the broadcast's part of host_bound's)."""
    st = [_stretch(i, "aten::unflatten_dense_tensors", 12.0, DDP) for i in range(STEPS)]
    by = {f.id: f for f in run_rules(typed(_job(0.6, 50.0, st, 16.0)))}
    hs = by["host_op_stall"]
    assert hs.gain_ms == pytest.approx(12.0) and hs.part_of == "broadcast_buffers"
    assert "of it, 12.00 ms is part of the 16.00 ms above (`broadcast_buffers`)" in hs.expected_gain
    assert "not counted again" in hs.expected_gain
    assert counted_gain_ms(list(by.values())) == pytest.approx(38.0 + 12.0)


def test_disjoint_twin_keeps_both_gains():
    """Twin: the long op is the optimizer's (6 ms per step, outside DDP's forward), the broadcast's ops hold 5 ms
    of idle and no stretch; device idle 14 % of the step, so host_bound stays silent. Nothing is shared: both
    keep their full gain and the total is 6 + 5."""
    st = [_stretch(i, "aten::_foreach_add_", 6.0, OPT) for i in range(STEPS)]
    by = {f.id: f for f in run_rules(typed(_job(0.14, 13.0, st, 5.0)))}
    assert "host_bound" not in by
    bb, hs = by["broadcast_buffers"], by["host_op_stall"]
    assert (bb.gain_ms, hs.gain_ms) == pytest.approx((5.0, 6.0))
    assert bb.shared_ms == 0 == hs.shared_ms and bb.part_of is None is hs.part_of
    assert "above" not in bb.expected_gain + hs.expected_gain
    assert counted_gain_ms(list(by.values())) == pytest.approx(11.0)


@pytest.mark.real(NCCL)
def test_nccl_data_counts_the_broadcast_idle_once():
    """The issue's trace: the unflatten under DDP's buffer broadcast is both host_op_stall's and the broadcast's
    idle; host_bound already leaves the long single ops' idle out (its waited idle in short gaps and in long gaps of
    many ops). The counted total is host_bound's and the long ops' idle together (the broadcast lies within them),
    not the three gains' sum."""
    from llmdiag.diagnose.analyze import analyze_path

    a = analyze_path(str(NCCL), jobs=1)
    by = {f.id: f for f in a.findings}
    hb, bb, hs = by["host_bound"], by["broadcast_buffers"], by["host_op_stall"]
    unflatten = sum(s.idle_ms for s in a.ranks[0].idle.stretches if s.op == "aten::unflatten_dense_tensors") \
        / a.ranks[0].nsteps
    assert bb.shared_ms == pytest.approx(bb.gain_ms - unflatten, abs=1e-3)
    assert f"{unflatten:.2f} ms is part of the {bb.gain_ms:.2f} ms above (`broadcast_buffers`)" in hs.expected_gain
    # host_op_stall names no switch of its own and adds only what lies outside the broadcast (the optimizer's
    # foreach ops, optimizer_step's): graded by that (< 3 % of the step), shown below, none of it counted again
    assert hs.severity == "low" and "rated low, not by its whole gain" in hs.expected_gain
    assert hs.part_of is not None and hs.shared_ms == pytest.approx(hs.gain_ms, abs=1e-3)
    op = by["optimizer_step"]
    dc = by["ddp_grad_copy"]  # its idle is host_bound's; its copies' own device time (0.51 ms) adds
    dm = by["data_movement"]  # cuDNN's layout transposes (5.04 ms): device busy time, no idle of the others
    bw = by["low_busbw"]  # the all-reduces' time the path holds now (communication, no idle of the others)
    assert counted_gain_ms(a.findings) == pytest.approx(
        hb.gain_ms + unflatten + op.gain_ms - op.shared_ms + dc.gain_ms - dc.shared_ms + dm.gain_ms + bw.gain_ms,
        abs=0.05)
    assert counted_gain_ms(a.findings) < hb.gain_ms + bb.gain_ms + hs.gain_ms - 20


def _straggler_case(stall_op: str) -> list:
    """Rank 1 stalls 20 ms per step in `stall_op` before launching its collectives (`comm_host_stall`), and the
    device idles 12 ms per step under a long `_AlltoAllSingle` (a stretch); the straggler finding (23 ms,
    simulated) and host_op_stall (12 ms) on rank 1."""
    from llmdiag.diagnose.model.analysis import Evidence, Finding
    from llmdiag.diagnose.rules.shared_time import share_idle

    s = summary(2)
    r = s["ranks"][1]
    r["idle"] = {"idle_ms": 20.0, "host_bound_ms": 20.0,
                 "stretches": [_stretch(i, "_AlltoAllSingle", 12.0, DDP) for i in range(STEPS)]}
    r["comm_host_stall"] = {"ms_per_step": 30.0, "op": stall_op, "thread": "t", "op_ms_per_step": 20.0,
                            "next_op": "_AlltoAllSingleBackward", "next_thread": "t", "next_ms_per_step": 10.0}
    a = typed(s)
    fs = [Finding("stragglers", "high", "Straggler rank", Evidence("rank 1 arrives last", "skew.stragglers", [1]),
                  "act", "≈ 23.00 ms per step", 23.0, gain_kind="estimate"),
          Finding("host_op_stall", "high", "idle", Evidence("rank 1 idle", "ranks[].idle.stretches", [1]),
                  "act", "up to 12.00 ms per step", 12.0, gain_kind="bound")]
    share_idle(a, fs)
    return fs


def test_a_stragglers_stall_and_the_long_op_it_stalls_in_count_once():
    """The stall's op is the stretch's: host_op_stall's 12 ms is part of the straggler's 23 ms."""
    sg, hs = _straggler_case("_AlltoAllSingle")
    assert sg.shared_ms == 0 and hs.shared_ms == pytest.approx(12.0) and hs.part_of == "stragglers"
    assert "of it, 12.00 ms is part of the 23.00 ms above (`stragglers`): the same host stall" in hs.expected_gain
    assert counted_gain_ms([sg, hs]) == pytest.approx(23.0)


def test_a_stragglers_stall_elsewhere_shares_nothing():
    """Twin: the straggler stalls in another op (`aten::nonzero`): both keep their gains, 23 + 12."""
    sg, hs = _straggler_case("aten::nonzero")
    assert sg.shared_ms == 0 == hs.shared_ms and hs.part_of is None and "above" not in hs.expected_gain
    assert counted_gain_ms([sg, hs]) == pytest.approx(35.0)


@pytest.mark.parametrize("idle_frac,host_bound_ms,counted", [(0.6, 50.0, 50.0), (0.14, 13.0, 6.0)])
def test_zero_grads_idle_lies_in_the_host_bound_idle(idle_frac, host_bound_ms, counted):
    """zero_grad's 6 ms of idle per step inside `Optimizer.zero_grad#SGD.zero_grad` holds no long-op stretch: it is
    host-bound idle (the host launching fills), inside host_bound's 50 ms, so part of it. The summary has no
    interval to tell where in the host-bound idle it lies: read as shared (the conservative way, a lower total).
    Twin: device idle 14 % of the step, host_bound silent: zero_grad keeps its 6 ms."""
    s = _job(idle_frac, host_bound_ms, [], 0.0)
    for r in s["ranks"]:
        r["chores"] = {"zero_grad_ms": 7.0, "zero_grad_launches": 160.0, "zero_grad_idle_ms": 6.0,
                       "zero_grad_op": "Optimizer.zero_grad#SGD.zero_grad"}
    by = {f.id: f for f in run_rules(typed(s))}
    zg = by["zero_grad"]
    assert zg.gain_ms == pytest.approx(6.0)
    if "host_bound" in by:
        assert zg.part_of == "host_bound" and zg.shared_ms == pytest.approx(6.0)
        assert "of it, 6.00 ms is part of the 50.00 ms above (`host_bound`)" in zg.expected_gain
    else:
        assert zg.part_of is None and zg.shared_ms == 0
    assert counted_gain_ms(list(by.values())) == pytest.approx(counted)
