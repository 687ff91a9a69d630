"""unfused_elementwise: many short eager elementwise kernels dominating compute, named by the ops that launch them;
silent on a GEMM-dominated step and on torch.compile's fused Triton kernels. Every expected number is computed
here from the kernels each test places."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.elementwise import is_elementwise
from llmdiag.diagnose.rules.fusion import ELEMENTWISE_FLOOR
from tests.gen.builder import TraceBuilder

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 80 << 30}]
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::{}<float>, at::detail::Array<char*, 2> >(int)"
# (launching op, functor in the kernel name): RMSNorm's pow/mean/rsqrt, rotary's neg/cat, SwiGLU's silu
CHAIN = [("aten::pow", "pow_tensor_scalar_kernel"), ("aten::mean", "MeanOps"), ("aten::rsqrt", "rsqrt_kernel"),
         ("aten::neg", "neg_kernel"), ("aten::cat", "CatArrayBatchedCopy"), ("aten::silu", "silu_kernel")]
REPEATS, EW_US = 30, 10  # per step: 30 × 6 kernels of 10 µs


def _trace(tmp_path, gemm_us: int, ops: bool = True, kernel=EW, steps: int = 2):
    b = TraceBuilder(rank=0, world_size=1, device_properties=H100)
    step = 200 + REPEATS * len(CHAIN) * (EW_US + 2) + gemm_us + 200
    for s in range(steps):
        t0 = s * step
        b.step(s + 1, t0, t0 + step)
        b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0 + 100, gemm_us, launch_at=t0 + 1)
        t = t0 + 100 + gemm_us
        for k in range(REPEATS):
            for j, (op, functor) in enumerate(CHAIN):
                at = t0 + 2 + (k * len(CHAIN) + j) % 90  # launches on the host, inside their op
                if ops:
                    b.cpu_op(op, at, 1)
                b.kernel(kernel.format(functor), t, EW_US, launch_at=at)
                t += EW_US + 2
        # the host waits for the step's work (loss.item()): the device's work sets the step, not the host
        b.cpu_op("cudaDeviceSynchronize", t0 + 150, t - 2 - (t0 + 150) + 1, cat="cuda_runtime")
    b.write(tmp_path / "run" / "rank0.json")
    return analyze_path(str(tmp_path / "run"), jobs=1)


def test_a_host_that_sets_the_step_caps_the_gain(tmp_path):
    """The same step without the host's wait for its device (its launches done in the first ~92 µs, the next step's
    at its start): the device idles 24 % of the 3,160-µs step (100 µs before the GEMM, 300 after the last kernel)
    and fused kernels only lengthen that idle: the host's waits for the device, 0, cap the gain."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=H100)
    step = 200 + REPEATS * len(CHAIN) * (EW_US + 2) + 600 + 200
    for s in range(2):
        t0 = s * step
        b.step(s + 1, t0, t0 + step)
        b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t0 + 100, 600, launch_at=t0 + 1)
        t = t0 + 700
        for k in range(REPEATS):
            for j, (op, functor) in enumerate(CHAIN):
                at = t0 + 2 + (k * len(CHAIN) + j) % 90
                b.cpu_op(op, at, 1)
                b.kernel(EW.format(functor), t, EW_US, launch_at=at)
                t += EW_US + 2
    b.write(tmp_path / "run" / "rank0.json")
    (f,) = _f(analyze_path(str(tmp_path / "run"), jobs=1))
    assert f.gain_ms == 0.0 and "the step shortens by at most that now" in f.evidence.text


def _f(a):
    return [f for f in a.findings if f.id == "unfused_elementwise"]


@pytest.mark.parametrize("ops", [True, False], ids=["launching ops", "names only"])
def test_eager_rmsnorm_rotary_silu_fire_with_a_bound(tmp_path, ops):
    a = _trace(tmp_path, gemm_us=600, ops=ops)
    ew = REPEATS * len(CHAIN) * EW_US  # 1,800 µs per step
    h = a.ranks[0].hints
    assert h.elementwise_frac == pytest.approx(ew / (ew + 600))
    assert h.elementwise_per_step == REPEATS * len(CHAIN) and h.elementwise_median_us == pytest.approx(EW_US)
    per = REPEATS * EW_US / 1e3  # ms per step of each op
    assert h.elementwise_ms_by_pattern == {"mean/pow/rsqrt (RMSNorm)": pytest.approx(3 * per),
                                           "cat/neg (rotary)": pytest.approx(2 * per),
                                           "silu (activation)": pytest.approx(per)}
    fusable = 3 * per * (1 - 1 / 3) + 2 * per * (1 - 1 / 2)  # silu alone: nothing to fuse it with here
    (f,) = _f(a)
    assert f.gain_ms == pytest.approx(fusable) and f.gain_kind == "bound" and f.expected_gain.startswith("up to")
    assert "RMSNorm" in f.evidence.text and "rotary" in f.evidence.text and "torch.compile" in f.action


def test_silent_twin_gemm_dominated(tmp_path):
    a = _trace(tmp_path, gemm_us=20_000)
    assert a.ranks[0].hints.elementwise_frac < ELEMENTWISE_FLOOR and not _f(a)


def test_silent_twin_compiled_triton_kernels(tmp_path):
    a = _trace(tmp_path, gemm_us=600, kernel="triton_poi_fused_{}_0")
    assert a.ranks[0].hints.elementwise_frac == 0.0 and not _f(a)


@pytest.mark.parametrize("name,want", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>(int)", True),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)", True),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl>(int)", True),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(int)", True),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(float*)", True),
    ("triton_poi_fused_mul_pow_rsqrt_0", False), ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", False),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", False), ("multimem_one_shot_reduce_kernel", False),
])
def test_elementwise_names(name, want):
    assert is_elementwise(name) is want
