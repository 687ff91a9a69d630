"""data_movement (metric and rule) on a generated single-rank trace; answers by construction.

Per 10-ms step (3 steps): `aten::mm` -> a 5,000-us GEMM at +100; `aten::cudnn_convolution` (under `aten::_convolution`)
launching cuDNN's `nchwToNhwcKernel` 1,000 us at +5,300, an NHWC xmma convolution 1,000 us, `nhwcToNchwKernel`
500 us at +7,300 (an all-reduce on stream 20 from +7,700 to +7,900: 100 us of it beside the transpose); `aten::cat`
-> `CatArrayBatchedCopy` 300 us at +8,000, a 100-us kernel on stream 8 at +8,100 (200 us of the cat alone); a cast
(`aten::to` > `aten::_to_copy` > `aten::copy_`) -> `direct_copy_kernel` 500 us at +8,400 (left out: a conversion);
`aten::clone` > `aten::copy_` -> `direct_copy_kernel` 50 us at +9,000.
Layout per step: 1.5 ms of kernels, 1.5 ms alone (0.1 beside the collective), 2 kernels; cat 0.3 / 0.2 ms; copy 0.05.
Compute: 5 + 2.5 (5.3-7.8) + 0.3 + 0.5 + 0.05 = 8.35 ms: layout 18 % (fires, bound 1.5 ms = 15 % of the step: high),
cat 3.6 % (no finding). Twin: the convolution's own kernel is NCHW (`implicit_convolve_sgemm`): no layout finding."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.data_movement import family_of
from tests.gen.builder import TraceBuilder

STEP = 10_000
COPY = "void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda>"


def _trace(path, nhwc: bool = True) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        b.cpu_op("aten::mm", t + 50, 40)
        b.kernel("sm80_gemm_kernel", t + 100, 5000, launch_at=t + 60)
        b.cpu_op("aten::_convolution", t + 5190, 120)
        b.cpu_op("aten::cudnn_convolution", t + 5200, 100)
        b.kernel("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", t + 5300, 1000,
                 launch_at=t + 5210)
        b.kernel("sm80_xmma_fprop_implicit_gemm_tf32f32_nhwckrsc_nhwc" if nhwc else "implicit_convolve_sgemm",
                 t + 6300, 1000, launch_at=t + 5220)
        b.kernel("void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false>", t + 7300, 500,
                 launch_at=t + 5230)
        b.nccl("allreduce", t + 7700, 200, nelems=1 << 20)
        b.cpu_op("aten::cat", t + 7950, 40)
        b.kernel("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>",
                 t + 8000, 300, launch_at=t + 7960)
        b.kernel("vectorized_elementwise_kernel_add", t + 8100, 100, stream=8, launch_at=t + 7995)
        b.cpu_op("aten::to", t + 8350, 40)
        b.cpu_op("aten::_to_copy", t + 8352, 36)
        b.cpu_op("aten::copy_", t + 8354, 32)
        b.kernel(COPY, t + 8400, 500, launch_at=t + 8360)
        b.cpu_op("aten::clone", t + 8950, 40)
        b.cpu_op("aten::copy_", t + 8952, 36)
        b.kernel(COPY, t + 9000, 50, launch_at=t + 8960)
    b.write(path)


def _analysis(d):
    return analyze_path(str(d), jobs=1)


def test_families_by_name_cuda_and_rocm():
    assert family_of("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<float>") == "cat"
    assert family_of("batched_transpose_32x16_half") == "layout"
    assert family_of("void cudnn::ops::nhwcToNchwKernel<float>") == "layout"
    assert family_of(COPY) == "copy"
    assert family_of("void fbgemm_gpu::permute_2D_data_kernel<false, int>") is None
    assert family_of("igemm_fwd_gtcx3_nhwc_bf16") is None


def test_metric_per_family(tmp_path):
    _trace(tmp_path / "a" / "rank0.json")
    a = _analysis(tmp_path / "a")
    dm = a.ranks[0].data_movement
    lay, cat, cp = dm.family("layout"), dm.family("cat"), dm.family("copy")
    assert (lay.kernel_ms, lay.busy_ms, lay.under_comm_ms, lay.count) == pytest.approx((1.5, 1.5, 0.1, 2.0))
    assert lay.nhwc_convs and [(o.op, o.parent) for o in lay.ops] == [("aten::cudnn_convolution", "aten::_convolution")]
    assert (cat.kernel_ms, cat.busy_ms, cat.count) == pytest.approx((0.3, 0.2, 1.0))
    assert cat.ops[0].op == "aten::cat"
    assert (cp.kernel_ms, cp.busy_ms, cp.count) == pytest.approx((0.05, 0.05, 1.0))  # the cast left out
    assert [(o.op, o.parent) for o in cp.ops] == [("aten::copy_", "aten::clone")]
    f = {f.id: f for f in a.findings}["data_movement"]
    # 1.5 ms alone on the device, 0.1 of it beside a collective (a step the collective sets does not shorten by it)
    assert f.gain_ms == pytest.approx(1.4, abs=1e-6) and f.gain_kind == "bound" and f.severity == "high"
    assert "layout-transpose" in f.evidence.text and "`aten::cudnn_convolution` under `aten::_convolution`" in f.evidence.text
    assert "channels_last" in f.action


def test_silent_where_the_convolutions_have_no_nhwc_kernel(tmp_path):
    _trace(tmp_path / "b" / "rank0.json", nhwc=False)
    a = _analysis(tmp_path / "b")
    assert not a.ranks[0].data_movement.family("layout").nhwc_convs
    assert "data_movement" not in {f.id for f in a.findings}


def _fams(r: dict, rows: list[dict]) -> None:
    r["data_movement"] = {"families": rows}


def _rule(s: dict) -> list:
    from llmdiag.diagnose.rules import findings
    from tests.gen.summaries import typed
    return [f for f in findings(typed(s)) if f.id == "data_movement"]


def _summary(rows_of):
    from tests.gen.summaries import summary
    s = summary(2)
    for r in s["ranks"]:
        r["compute_ms"] = 100.0
        _fams(r, rows_of(r))
    return s


def _row(family: str, kernel_ms: float, busy_ms: float, **kw) -> dict:
    return {"family": family, "kernel_ms": kernel_ms, "busy_ms": busy_ms, "count": 4.0,
            "kernel": "CatArrayBatchedCopy" if family == "cat" else "direct_copy_kernel",
            "ops": [{"op": "aten::cat", "parent": "", "ms": kernel_ms, "count": 4.0}], **kw}


def test_floors_share_and_busy_ms():
    """compute 100 ms per step: a family at 9.9 ms (9.9 %) is silent, at 10 ms it fires; 10 ms of kernels with
    0.4 ms on the busy path (the rest beside other kernels) is silent (the 0.5-ms floor)."""
    assert not _rule(_summary(lambda r: [_row("cat", 9.9, 9.9)]))
    (f,) = _rule(_summary(lambda r: [_row("cat", 10.0, 8.0)]))
    assert f.gain_ms == pytest.approx(8.0) and f.evidence.ranks == [0, 1]
    assert not _rule(_summary(lambda r: [_row("cat", 10.0, 0.4)]))


def test_one_finding_names_the_largest_family_and_lists_the_other():
    """cat 12 ms alone, copies 15 ms of kernels of which 11 ms alone: the finding is cat's (12 > 11), copies listed."""
    (f,) = _rule(_summary(lambda r: [_row("cat", 12.0, 12.0), _row("copy", 15.0, 11.0)]))
    assert f.gain_ms == pytest.approx(12.0) and "concatenation kernels" in f.evidence.text
    assert "Also: copy kernels 11.00 ms per step (find the .contiguous() / .clone())" in f.evidence.text
