"""Gains after a fix (metrics/rank/critical_path/after_fix.py, rules/after_fix.py) on small generated traces whose answers are worked
out by hand in each docstring from the times the test places (µs), never from llmdiag's code."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.rules import after_fix
from tests.gen.builder import TraceBuilder

SGEMM = "volta_sgemm_128x64_nn"
V100 = [{"name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 34359738368}]
FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
NCHW = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(x)"
CONV = "sm70_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"


def _rank(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _fetch_then_gemm(fetch: str = FETCH, steps: int = 6) -> TraceBuilder:
    """Per 30,040-µs step k0: a 30 ms fetch [k0+5, k0+30005], `aten::mm` [k0+30010, k0+30030] launching (at
    k0+30015) a 20 ms fp32 GEMM at k0+30030, under the next step's fetch."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    for k in range(steps):
        k0 = k * 30_040
        b.step(k + 1, k0, k0 + 30_040)
        b.cpu_op(fetch, k0 + 5, 30_000)
        b.cpu_op("aten::mm", k0 + 30_010, 20)
        b.kernel(SGEMM, k0 + 30_030, 20_000, launch_at=k0 + 30_015)
    return b


def test_gemm_pays_once_the_dataloader_is_fixed(tmp_path):
    """The device windows run from each GEMM's end to the next (30,040 µs), the first from its fetch's begin (5)
    to the second window's start (50,030): 50,025. Fixed, the fetch costs nothing: the first GEMM begins 25 µs
    into its window (5 to `aten::mm`, 5 to the launch, 15 to the kernel) and ends 20,025 µs in (30,000 off); from
    then on the host runs ahead and a step is its device work, the 20,000-µs GEMM back to back: 10,040 off each
    of the next three and the fifth's (the sixth, last, is left out): (30,000 + 4 × 10,040) / 5 = 14,032 µs.
    With the GEMM 4× faster too each step is 15,000 µs shorter still, the GEMM's 20,000 × (1 − 1/4). Now it
    gains only in the first step, 15,000 / 5 = 3,000 µs. The step then: (20,025 + 4 × 20,000) / 5 = 20,005 µs."""
    g = _rank(tmp_path, _fetch_then_gemm()).simulated_gain_ms
    assert g["after_fix:dataloader"] == pytest.approx(14.032)
    assert g["after_fix"] == pytest.approx(14.032)
    assert g["after_fix:step_ms"] == pytest.approx(20.005)
    assert g["after_fix/fp32_gemm/4"] == pytest.approx(15.0)
    assert g["fp32_gemm/4"] == pytest.approx(3.0)


MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, std::array<char*, 3> >(int, x)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >(x)"


def test_fusion_pays_once_the_dataloader_is_fixed(tmp_path):
    """The GEMM's step with its 20,000 µs of device work as two elementwise kernels instead, `aten::mul` then
    `aten::add`, 10,000 µs each (launched at k0+30015 and k0+30025, back to back from k0+30030): one `add/mul`
    pattern of k = 2 ops, fusable 20,000 × (1 − 1/2) = 10,000 µs per step; each kernel is shortened alike, to
    5,000. Once the fetch is gone a step is its device work: 20,000 µs, 10,000 fused, so fusion takes 10.00 ms
    per step off then."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    for k in range(6):
        k0 = k * 30_040
        b.step(k + 1, k0, k0 + 30_040)
        b.cpu_op(FETCH, k0 + 5, 30_000)
        b.cpu_op("aten::mul", k0 + 30_010, 10)
        b.kernel(MUL, k0 + 30_030, 10_000, launch_at=k0 + 30_015)
        b.cpu_op("aten::add", k0 + 30_020, 10)
        b.kernel(ADD, k0 + 40_030, 10_000, launch_at=k0 + 30_025)
    g = _rank(tmp_path, b).simulated_gain_ms
    assert g["after_fix/elementwise"] == pytest.approx(10.0)


def test_no_bound_without_a_fix_of_its_own(tmp_path):
    """The same 30 ms of host time in `aten::index_put_`: no single fix removes it, nothing is assumed fixed."""
    g = _rank(tmp_path, _fetch_then_gemm("aten::index_put_")).simulated_gain_ms
    assert not any(k.startswith("after_fix") for k in g)


def test_an_allocator_storm_in_one_step_sets_no_bound(tmp_path):
    """Five 10,000-µs steps (`aten::mm` at k0+10 launches a 9,000-µs GEMM at k0+20, the device idle 1,000 µs per
    step), the second holding a 40 ms `cudaFree` [k0+100, k0+40100] before its launch (the step 50,000 µs). The
    free's removal shortens one of the four counted steps: no majority, so the allocator is not assumed fixed."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    k0 = 0
    for k in range(5):
        n = 50_000 if k == 1 else 10_000
        b.step(k + 1, k0, k0 + n)
        if k == 1:
            b.cpu_op("cudaFree", k0 + 100, 40_000, cat="cuda_runtime")
        at = k0 + (40_110 if k == 1 else 10)
        b.cpu_op("aten::mm", at, 10)
        b.kernel(SGEMM, at + 10, 9_000, launch_at=at + 5)
        k0 += n
    g = _rank(tmp_path, b).simulated_gain_ms
    assert not any(k.startswith("after_fix") for k in g)


def test_layout_kernels_after_the_allocator_fix(tmp_path):
    """Per 40,050-µs step k0: a 1-µs memset at k0+5 (the step's device window begins there), a 30 ms `cudaFree`
    [k0+10, k0+30010] (the device idle), then `aten::cudnn_convolution` [k0+30020, k0+30060] launching a 4,000-µs
    NCHW->NHWC transpose (at k0+30030, runs k0+30040-34040) and a 6,000-µs NHWC convolution kernel (launched at
    k0+30032, runs k0+34040-40040 behind it), and `cudaDeviceSynchronize` [k0+30070, k0+40045] returns 5 µs after
    it. Fixed, the free costs nothing and every later point moves 30,000 µs earlier; without the transpose too the
    convolution begins when the transpose would have (its launch is 8 µs before that), 4,000 µs earlier still, and
    the sync returns with it: the transposes take 4.00 ms per step off once the allocator calls are gone."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    for k in range(5):
        k0 = k * 40_050
        b.step(k + 1, k0, k0 + 40_050)
        b.cpu_op("aten::zero_", k0 + 1, 4)
        b.memset(k0 + 5, 1, launch_at=k0 + 2)
        b.cpu_op("cudaFree", k0 + 10, 30_000, cat="cuda_runtime")
        b.cpu_op("aten::cudnn_convolution", k0 + 30_020, 40)
        b.kernel(NCHW, k0 + 30_040, 4_000, launch_at=k0 + 30_030)
        b.kernel(CONV, k0 + 34_040, 6_000, launch_at=k0 + 30_032)
        b.cpu_op("cudaDeviceSynchronize", k0 + 30_070, 9_975, cat="cuda_runtime")
    g = _rank(tmp_path, b).simulated_gain_ms
    assert "after_fix:allocator" in g
    assert g["after_fix/data_movement:layout"] == pytest.approx(4.0)


def test_clause_says_the_gain_after_the_fix_only_where_it_is_material(tmp_path):
    """The rule side: the sentence names the bound, its simulated gain and the fix's own; below MORE_MS (0.5 ms)
    after the fix (off the path even then) or without the simulation it says nothing."""
    m = _rank(tmp_path, _fetch_then_gemm())
    text = after_fix.clause([m], "fp32_gemm/4", "the GEMMs faster")
    assert "15.00 ms per step once the DataLoader" in text and "sets the step (simulated, assuming" in text
    assert "14.03 ms the fix alone" in text
    m.simulated_gain_ms["after_fix/fp32_gemm/4"] = 0.4
    assert after_fix.clause([m], "fp32_gemm/4", "the GEMMs faster") == ""
    del m.simulated_gain_ms["after_fix/fp32_gemm/4"]
    assert after_fix.clause([m], "fp32_gemm/4", "the GEMMs faster") == ""
