"""The GEMM cost fit over a run's own shapes (diagnose.metrics.op_scaling) and the per-action fixed time it
and the autograd engine's bookkeeping add (diagnose.metrics.action_costs), against answers computed by hand
from coefficients the test chooses."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.op_scaling import GemmFit, fit_gemms, gemm_shape
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import MAIN_TID, TraceBuilder

A, MAC, OUT = 2_000.0, 1.0, 10.0  # ns per call, per multiply-accumulate, per output element
T = 64  # tokens: the M of the forward GEMMs, the K of the grad-weight ones
SHAPES = [(T, 32, 16), (T, 16, 48), (T, 48, 32), (32, T, 16), (16, T, 48)]  # 3 forward, 2 grad-weight


def _ns(m, k, n):
    return A + MAC * m * k * n + OUT * m * n


def test_shapes_of_mm_and_addmm_only_when_they_multiply():
    assert gemm_shape("aten::mm", [[8, 4], [4, 3]]) == (8, 4, 3)
    assert gemm_shape("aten::addmm", [[3], [8, 4], [4, 3]]) == (8, 4, 3)  # bias first
    assert gemm_shape("aten::mm", [[8, 4], [5, 3]]) is None  # inner dims differ
    assert gemm_shape("aten::mm", [[2, 8, 4], [2, 4, 3]]) is None  # not 2-D
    assert gemm_shape("aten::mm", None) is None and gemm_shape("aten::mm", [[8, 4]]) is None


def test_fit_recovers_the_coefficients_and_the_tokens():
    samples = [(s, int(_ns(*s))) for s in SHAPES for _ in range(3)] + [((T, 32, 16), int(_ns(T, 32, 16)))]
    f = fit_gemms(samples)
    assert f.a == pytest.approx(A, abs=1.0) and f.per_mac == pytest.approx(MAC, rel=1e-3)
    assert f.per_out == pytest.approx(OUT, rel=1e-3) and f.tokens == T


def test_a_negative_term_is_dropped_and_too_few_shapes_fit_nothing():
    """Times whose exact fit has a negative output term: that term is fixed at 0 and the call and MAC terms
    refitted, which is the straight line of time on MACs (numpy's polyfit, one sample per shape)."""
    import numpy as np

    y = [A + MAC * m * k * n - 1.0 * m * n for m, k, n in SHAPES]
    f = fit_gemms([(s, int(v)) for s, v in zip(SHAPES, y)])
    slope, icpt = np.polyfit([float(m * k * n) for m, k, n in SHAPES], [float(int(v)) for v in y], 1)
    assert f.per_out == 0.0 and f.per_mac == pytest.approx(slope, rel=1e-9) and f.a == pytest.approx(icpt, rel=1e-6)
    assert fit_gemms([(s, int(_ns(*s))) for s in SHAPES[:2]]) is None  # two shapes: three terms not told apart


def test_fixed_share_is_the_call_plus_a_grad_weight_gemms_output():
    f = GemmFit(A, MAC, OUT, T)
    fwd, wgrad = (T, 32, 16), (32, T, 16)
    assert f.fixed_share(fwd) == pytest.approx(A / _ns(*fwd))
    assert f.fixed_share(wgrad) == pytest.approx((A + OUT * 32 * 16) / _ns(*wgrad))


def _action(tmp_path, shapes: bool):
    """One backward action of 2 000 µs: the five GEMMs back to back from 100 µs (their times exactly the
    chosen coefficients'; with or without Input Dims), then an autograd node: `evaluate_function:
    MmBackward0` 100 µs holding `MmBackward0` 80 µs holding `aten::add` 60 µs. No leaf view op: dispatch 0."""
    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    b.thread_name(MAIN_TID, "pt_main_thread")
    b.step(1, 0, 3000)
    b.pp(0, "B", 0, 0, 2000)
    t = 100.0
    for m, k, n in SHAPES:
        dur = _ns(m, k, n) / 1e3
        args = {"Input Dims": [[m, k], [k, n]], "Input type": ["float", "float"]} if shapes else None
        b.cpu_op("aten::mm", t, dur, args=args)
        t += dur
    b.cpu_op("autograd::engine::evaluate_function: MmBackward0", 1800, 100)
    b.cpu_op("MmBackward0", 1810, 80)
    b.cpu_op("aten::add", 1820, 60)
    return run_job(RankJob(b.write(str(tmp_path / "rank0.json")), None, False, 0))


def test_action_fixed_time_with_gemm_shapes_and_autograd_bookkeeping(tmp_path):
    """Fixed = uncovered time + bookkeeping (100 − 80) + (80 − 60) + per GEMM its share × its time (the call;
    a grad-weight GEMM's output too)."""
    out = _action(tmp_path, shapes=True)
    assert out.error is None and len(out.actions) == 1
    gemms = sum(_ns(*s) for s in SHAPES)
    covered = gemms + 100_000
    shares = sum(A + (OUT * s[0] * s[2] if s[1] == T else 0.0) for s in SHAPES)
    want = (2_000_000 - covered) + 40_000 + shares
    assert out.action_fixed_ns[0] == pytest.approx(want, abs=len(SHAPES) + 2)


def test_without_shapes_gemms_keep_the_dispatch_model(tmp_path):
    """The same action without Input Dims: no fit, each GEMM one dispatch (0 here), bookkeeping still read."""
    out = _action(tmp_path, shapes=False)
    covered = sum(_ns(*s) for s in SHAPES) + 100_000
    assert out.action_fixed_ns[0] == pytest.approx(2_000_000 - covered + 40_000, abs=len(SHAPES) + 2)
