"""fp32_gemm on every architecture with tensor cores: fp16 + GradScaler below compute capability 8.0, bf16 (and
TF32) from 8.0; silent on bf16 GEMMs, on a tiny fp32 share, and on GPUs without tensor cores. The fp32 share each
test expects is computed here from the kernels it places, not by the code under test."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.devices import compute_capability
from llmdiag.diagnose.rules import findings
from llmdiag.diagnose.rules.base import FP32_TO_BF16_SPEEDUP
from llmdiag.diagnose.rules.precision import FP32_FLOOR
from tests.gen.builder import TraceBuilder

V100 = {"name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 16 << 30}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 80 << 30}
P100 = {"name": "Tesla P100-PCIE-16GB", "computeMajor": 6, "computeMinor": 0, "totalGlobalMem": 16 << 30}


def _trace(tmp_path, props, gemm: str, gemm_us: int, other_us: int, steps: int = 3):
    """Per step: one GEMM kernel of gemm_us and one elementwise kernel of other_us, back to back, under a
    backward and an optimizer op (a training step); the host synchronizes at the step's end (returning 10 µs after
    the device is done) and begins the next step 90 µs later, so a faster GEMM brings every later step forward by
    the time it saves: the simulated gain per step is gemm_us × (1 − 1/speed-up)."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=[props])
    period = gemm_us + other_us + 200
    for k in range(steps):
        k0 = k * period
        b.step(k + 1, k0, k0 + period)
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", k0 + 5, 50)
        b.kernel(gemm, k0 + 100, gemm_us, launch_at=k0 + 10)
        b.kernel("void at::native::vectorized_elementwise_kernel<4>()", k0 + 100 + gemm_us, other_us,
                 launch_at=k0 + 20)
        b.cpu_op("Optimizer.step#AdamW.step", k0 + 60, 20)
        b.cpu_op("cudaDeviceSynchronize", k0 + 90, gemm_us + other_us + 20, cat="cuda_runtime")
    b.write(tmp_path / "run" / "rank0.json")
    return analyze_path(str(tmp_path / "run"), jobs=1)


def _fp32(a):
    return [f for f in a.findings if f.id == "fp32_gemm"]


def test_v100_sgemm_advises_fp16_with_grad_scaler(tmp_path):
    a = _trace(tmp_path, V100, "volta_sgemm_128x64_tn", 3000, 1000)
    (f,) = _fp32(a)
    assert "torch.float16" in f.action and "GradScaler" in f.action
    assert "bfloat16" not in f.action and "allow_tf32" not in f.action
    share, compute = 3000 / 4000, 4.0  # ms per step
    assert a.ranks[0].hints.fp32_gemm_frac == pytest.approx(share)
    assert f.gain_ms == pytest.approx(share * compute * (1 - 1 / FP32_TO_BF16_SPEEDUP), rel=1e-6)
    assert f.gain_kind == "simulated" and f.expected_gain.startswith("≈")
    assert "simulated on the rank's dependency graph" in f.expected_gain


def test_gain_is_an_estimate_without_a_simulation(tmp_path):
    """A summary without the what-if (an older summary, or one the graph could not simulate) keeps the estimate:
    the fp32 GEMM time on the path × (1 − 1/4) = 3 ms × 0.75 (the host waits for the device each step)."""
    a = _trace(tmp_path, V100, "volta_sgemm_128x64_tn", 3000, 1000)
    a.ranks[0].simulated_gain_ms = {}
    (f,) = [f for f in findings(a) if f.id == "fp32_gemm"]
    assert f.gain_kind == "estimate" and "not simulated" in f.expected_gain
    assert f.gain_ms == pytest.approx(3.0 * (1 - 1 / FP32_TO_BF16_SPEEDUP), rel=1e-6)


def test_host_paced_steps_gain_nothing(tmp_path):
    """The host launches each step's GEMM (3 ms) and elementwise kernel (1 ms) at k0+10 and k0+20, then works 9.9
    ms and never waits for them; its steps begin every 10 ms whatever the device does, so a faster GEMM only lengthens the device's
    idle: simulated gain 0 (low). The estimate, which reads the GEMM as on the path (the elementwise kernel was
    queued behind it) and sees no host wait to cap it by, credits 3 ms × (1 − 1/4) = 2.25 ms, high."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=[V100])
    for k in range(3):
        k0 = k * 10_000
        b.step(k + 1, k0, k0 + 10_000)
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", k0 + 5, 50)
        b.kernel("volta_sgemm_128x64_tn", k0 + 100, 3000, launch_at=k0 + 10)
        b.kernel("void at::native::vectorized_elementwise_kernel<4>()", k0 + 3100, 1000, launch_at=k0 + 20)
        b.cpu_op("aten::host_work", k0 + 60, 9900)  # the host busy until its next step
    b.write(tmp_path / "run" / "rank0.json")
    a = analyze_path(str(tmp_path / "run"), jobs=1)
    (f,) = _fp32(a)
    assert f.gain_ms == 0.0 and f.gain_kind == "simulated" and f.severity == "low"
    a.ranks[0].simulated_gain_ms = {}
    (f,) = [f for f in findings(a) if f.id == "fp32_gemm"]
    assert f.gain_ms == pytest.approx(2.25) and f.gain_kind == "estimate"


def test_a100_sgemm_advises_bf16_and_tf32(tmp_path):
    a = _trace(tmp_path, A100, "ampere_sgemm_128x64_tn", 3000, 1000)
    (f,) = _fp32(a)
    assert "torch.bfloat16" in f.action and "allow_tf32" in f.action and "GradScaler\"" not in f.action


def test_a100_tf32_already_on_is_not_advised_tf32(tmp_path):
    """Some GEMMs already run as TF32: the flag is on, so only bf16 is advised for the fp32 rest."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=[A100])
    b.step(1, 0, 10_000)
    b.kernel("ampere_sgemm_128x64_tn", 100, 3000)
    b.kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>()", 3100, 500)
    b.write(tmp_path / "run" / "rank0.json")
    (f,) = _fp32(analyze_path(str(tmp_path / "run"), jobs=1))
    assert "torch.bfloat16" in f.action and "allow_tf32" not in f.action


def test_compute_capability_from_the_name_when_the_trace_lacks_it(tmp_path):
    props = {"name": "Tesla T4", "totalGlobalMem": 16 << 30}
    a = _trace(tmp_path, props, "turing_sgemm_128x64_tn", 3000, 1000)
    assert a.ranks[0].hints.compute_capability is None and compute_capability("Tesla T4") == 7.5
    (f,) = _fp32(a)
    assert "torch.float16" in f.action and "7.5" in f.action


@pytest.mark.parametrize("props,gemm,gemm_us,other_us", [
    (A100, "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", 3000, 1000),  # bf16 already
    (V100, "volta_sgemm_128x64_tn", 90, 910),  # fp32, but 9 % of compute
    (P100, "maxwell_sgemm_128x64_tn", 3000, 1000),  # no tensor cores
])
def test_silent_twins(tmp_path, props, gemm, gemm_us, other_us):
    a = _trace(tmp_path, props, gemm, gemm_us, other_us)
    assert gemm_us / (gemm_us + other_us) <= FP32_FLOOR or "sgemm" not in gemm or props is P100
    assert not _fp32(a)


@pytest.mark.parametrize("name,cc", [("Tesla V100-SXM2-16GB", 7.0), ("NVIDIA GeForce RTX 2080 Ti", 7.5),
                                     ("Tesla T4", 7.5), ("NVIDIA A100-SXM4-80GB", 8.0), ("NVIDIA A10G", 8.6),
                                     ("NVIDIA H100 80GB HBM3", 9.0), ("NVIDIA L4", 8.9), ("NVIDIA B200", 10.0),
                                     ("AMD Instinct MI300X", None), ("", None), ("Tesla P100-PCIE-16GB", 6.0)])
def test_compute_capability_table(name, cc):
    assert compute_capability(name) == cc


def test_amd_cdna_fp32_tensile_gemms_get_bf16_advice(tmp_path):
    from llmdiag.diagnose.rules.precision import AMD_SPEEDUP

    mi250 = {"name": "AMD Instinct MI250X", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 64 << 30}
    a = _trace(tmp_path, mi250, "Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1_SN", 3000, 1000)
    (f,) = _fp32(a)
    assert "torch.bfloat16" in f.action and "allow_tf32" not in f.action and "compute capability" not in f.evidence.text
    assert f.gain_ms == pytest.approx(0.75 * 4.0 * (1 - 1 / AMD_SPEEDUP), rel=1e-6)


def test_amd_without_matrix_cores_is_silent(tmp_path):
    radeon = {"name": "AMD Radeon RX 6900 XT", "computeMajor": 10, "computeMinor": 3, "totalGlobalMem": 16 << 30}
    assert not _fp32(_trace(tmp_path, radeon, "Cijk_Alik_Bljk_SB_MT64x16x32_SN", 3000, 1000))
