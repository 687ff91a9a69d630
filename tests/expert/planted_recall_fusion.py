"""Planted scenarios for issue #34's recall (branch fusion): pointwise kernels chained to normalization kernels on
the path of a device-bound step (the `norm_fusion` finding), with two silent twins: the same kernels in a step the
host sets (the device idles under a long host op: fusing them takes nothing off), and the same pointwise kernels
next to GEMMs with no normalization (not this fusion's chain).

Each job is written here (tests/gen/builder.py events, Knobs.writer). The exact answer below is arithmetic on the
placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import Knobs
from tests.gen.builder import TraceBuilder

A100 = [{"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 85899345920}]
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn"  # bf16 tensor-core GEMM: no fp32 finding
BN_FW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<__nv_bfloat16, float, int, 128, true, 1, true>(cudnnTensorStruct, x)"
BN_BW = "void cudnn::bn_bw_1C11_kernel_new<__nv_bfloat16, float, float2, 128, true, 1>(float, float, x)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3> >(x)"
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
        "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}, x>(x)")
THR = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl, x>(x)"
STEPS = 6
# One step's device work, back to back on stream 7 from k0+100 (µs): (launching op, kernel, duration).
CHAIN = [("aten::mm", GEMM, 2_000), ("aten::cudnn_batch_norm", BN_FW, 500), ("aten::add_", ADD, 300),
         ("aten::relu_", RELU, 300), ("aten::threshold_backward", THR, 300),
         ("aten::cudnn_batch_norm_backward", BN_BW, 600), ("aten::mm", GEMM, 2_000)]
DEVICE_US = sum(d for _, _, d in CHAIN)  # 6,000
STEP = 6_200  # host: 7 ops of 10 µs from k0+10, then cudaDeviceSynchronize [k0+90, k0+6,105]; 95 µs to the next step
HOST_STEP = 20_200  # twin: the host spends 20,000 µs in a host op after its launches (the device idle meanwhile),
# then launches a 10-µs optimizer kernel at k0+20,100 and synchronizes: the chain ends 14,000 µs before the host
# needs the device again, so fusing it takes nothing off the step
FOREACH = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::TensorListMetadata<2>, x>(x)"
# What fusion removes (metrics/rank/norm_fusion.py's model): the one-input ReLU (`aten::relu_`) wholly, the
# two-input add and threshold_backward by 2/3: 300 + (300 + 300) × 2/3 = 700 µs per step. The step is the device's
# (the host waits in the synchronize for the last kernel): every step ends 700 µs earlier.
SAVED_MS = (300 + (300 + 300) * 2 / 3) / 1000  # 0.70


def _job(folder: str, prefix: str, host_set: bool = False, no_norm: bool = False) -> list[str]:
    """`host_set`: after its launches the host runs a 20,000-µs host op (the device finishes under it and idles),
    then launches one short kernel and synchronizes: the step is the host's. `no_norm`: the two normalization kernels are GEMMs."""
    os.makedirs(folder, exist_ok=True)
    b = TraceBuilder(rank=0, world_size=1, device_properties=A100)
    step = HOST_STEP if host_set else STEP
    for k in range(1, STEPS + 1):
        k0 = (k - 1) * step
        b.step(k, k0, k0 + step)
        d = k0 + 100
        for i, (op, kern, dur) in enumerate(CHAIN):
            if no_norm and "batch_norm" in op:
                op, kern = "aten::mm", GEMM
            b.cpu_op(op, k0 + 10 + 10 * i, 8)
            b.kernel(kern, d, dur, launch_at=k0 + 13 + 10 * i)
            d += dur
        sync_at = k0 + 90
        if host_set:  # the optimizer's kernel after the host op keeps the idle inside the step's device window
            b.cpu_op("aten::index_put_", k0 + 90, 20_000)
            b.cpu_op("aten::_foreach_add_", k0 + 20_095, 8)
            d = k0 + 20_100
            b.kernel(FOREACH, d, 10, launch_at=k0 + 20_097)
            d += 10
            sync_at = k0 + 20_110
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": b.pid, "tid": 100,
               "ts": b.base_us + sync_at, "dur": max(d + 5 - sync_at, 5), "args": {}})
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


TITLE = r"[Nn]ormalization and pointwise kernels"
WHAT = (f"ReLU, residual add and ReLU-backward kernels beside two cuDNN BatchNorm kernels on a device-bound step: "
        f"fused, {SAVED_MS:.2f} ms per step of {STEP / 1000:g}")


def recall_fusion_scenarios() -> dict[str, tuple[Knobs, dict]]:
    return {
        "fusion_norm_chain": (Knobs(writer=_job), {
            "problems": [{"id": "norm_chain", "what": WHAT,
                          "any": [{"where": "finding", "rules": ["norm_fusion"], "min_severity": "medium",
                                   "text": rf"≈ {SAVED_MS:.2f} ms per step"}]}],
            "silent": [],
            "claims": [{"verdict": "right", "rules": ["norm_fusion"], "why": WHAT}]}),
        "fusion_norm_host_set_twin": (Knobs(writer=partial(_job, host_set=True)), {
            "problems": [],
            "claims": [{"verdict": "right", "rules": ["host_op_stall"],
                        "why": "the device idles ~14 ms per step under the 20 ms `aten::index_put_`"}],
            "silent": [{"id": "no_norm_fusion", "why": "the same chain, but the host sets the step (20 ms host op, "
                                                       "the device idle): fusing takes nothing off it",
                        "match": {"where": "finding", "text": TITLE}}]}),
        "fusion_no_norm_twin": (Knobs(writer=partial(_job, no_norm=True)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_norm_fusion", "why": "the same pointwise kernels between GEMMs: no normalization "
                                                       "chain to fuse them into",
                        "match": {"where": "finding", "text": TITLE}}]}),
    }


def register(out: dict) -> None:
    out.update(recall_fusion_scenarios())
