"""Planted scenarios for issue #34's recall (branch postfix): an edit that pays only once the step's present bound
is fixed (kineto resnet50_num_workers_0: fp32 convolutions, 2.6 ms now, the DataLoader sets the step), with two
silent twins: the same host time in an op no single fix removes, and an fp32 GEMM that is off the path even after
the fix.

Each job is written here (tests/gen/builder.py events, Knobs.writer). The exact answers below are arithmetic on
the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import Knobs
from tests.gen.builder import TraceBuilder

SGEMM = "volta_sgemm_128x64_nn"  # fp32 by its name
HGEMM = "volta_h884gemm_fp16_128x128_ldg8_nn"  # fp16 tensor-core GEMM
V100 = [{"name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 34359738368}]
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
STEP, STEPS, FETCH, GEMM = 30_040, 6, 30_000, 20_000  # µs
# Per step (µs from its start k0): the host fetches its batch [k0+5, k0+30005], then `aten::mm` [k0+30010,
# k0+30030] launches (at k0+30015) one fp32 GEMM of 20,000 µs that begins at k0+30030 and ends at k0+50030, under
# the next step's fetch: the device idles 10,040 of every 30,040 µs and the GEMM is off the step's path now (but in
# the first step, whose window begins at its fetch, k0+5: 50,025 µs to the next window's start, the GEMM's end).
# Once the fetch costs nothing (DataLoader workers), the host launches a step every ~40 µs and a step is its device
# work, the 20,000 µs GEMM: the fix alone takes 50,025 − 20,000 off the first step and 30,040 − 20,000 off the
# next four (the last step is left out of the mean). With the GEMM 4× faster too (the rule's assumed V100 speed-up)
# each step is 5,000 µs: 15,000 µs more off every one of them, so the GEMM's gain after the fix is
# GEMM × (1 − 1/4) = 15.00 ms per step.
AFTER_MS = GEMM * (1 - 1 / 4) / 1000


def _job(folder: str, prefix: str, fetch: str = DATALOADER, side_fp32: bool = False) -> list[str]:
    """`side_fp32`: the 20 ms GEMM is fp16 on stream 7 and a 6 ms fp32 GEMM runs beside it on stream 8 (launched
    at k0+30020, begins k0+30040): once the fetch is gone the step is still the fp16 stream's 20,000 µs, and the
    fp32 GEMM 4× faster (1,500 µs) takes nothing off it."""
    os.makedirs(folder, exist_ok=True)
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    for k in range(1, STEPS + 1):
        k0 = (k - 1) * STEP
        b.step(k, k0, k0 + STEP)
        b.cpu_op(fetch, k0 + 5, FETCH)
        b.cpu_op("aten::mm", k0 + 30_010, 20)
        b.kernel(HGEMM if side_fp32 else SGEMM, k0 + 30_030, GEMM, launch_at=k0 + 30_015)
        if side_fp32:
            b.kernel(SGEMM, k0 + 30_040, 6_000, stream=8, launch_at=k0 + 30_020)
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, std::array<char*, 3> >(int, x)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >(x)"
PAIRS, EW_US, OP_US = 100, 50, 20
EW_STEP = STEP + 2 * PAIRS * OP_US  # 34,040 µs
# The fusion job: after the same fetch, 100 `aten::mul` / `aten::add` pairs, one op every 20 µs from k0+30010
# (each launching at +5 one 50-µs elementwise kernel; the kernels run back to back from k0+30025 to k0+40025,
# under the next step's fetch): one `add/mul` pattern of k = 2 ops, 10,000 µs per step, fusable 10,000 × (1 − 1/2)
# = 5,000. Once the fetch is gone the host needs 4,000 µs per step and the device 10,000: a step is its device
# work; fused, 5,000 (still above the host's 4,000): fusion takes 5.00 ms per step off then.
EW_AFTER_MS = 2 * PAIRS * EW_US * (1 - 1 / 2) / 1000


def _ew_job(folder: str, prefix: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    for k in range(1, STEPS + 1):
        k0 = (k - 1) * EW_STEP
        b.step(k, k0, k0 + EW_STEP)
        b.cpu_op(DATALOADER, k0 + 5, FETCH)
        d = k0 + 30_025
        for i in range(2 * PAIRS):
            t = k0 + 30_010 + i * OP_US
            b.cpu_op("aten::mul" if i % 2 == 0 else "aten::add", t, OP_US - 5)
            b.kernel(MUL if i % 2 == 0 else ADD, d, EW_US, launch_at=t + 5)
            d += EW_US
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


AFTER = rf"{AFTER_MS:.2f} ms per step once the DataLoader[^;]* no longer sets the step \(simulated, assuming it is fixed first"
NO_AFTER = r"no longer sets? the step"
FETCH_RIGHT = {"verdict": "right", "rules": ["dataloader"],
               "why": f"every step fetches its batch {FETCH / 1000:g} ms on the training thread, the device idle"}
FP32_RIGHT = {"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 GEMMs on a V100 (fp16 tensor cores)"}


def recall_postfix_scenarios() -> dict[str, tuple[Knobs, dict]]:
    what = (f"an fp32 GEMM of {GEMM / 1000:g} ms per step hidden under the next step's {FETCH / 1000:g} ms DataLoader "
            f"fetch: nothing now, {AFTER_MS:.2f} ms per step once the fetch no longer sets the step")
    ew = (f"{2 * PAIRS} unfused mul/add kernels of {EW_US} µs per step under the next fetch: "
          f"{EW_AFTER_MS:.2f} ms per step fused once the fetch no longer sets the step")
    return {
        "postfix_fp32_after_dataloader": (Knobs(writer=_job), {
            "problems": [{"id": "fp32_after_dataloader", "what": what,
                          "any": [{"where": "finding", "rules": ["fp32_gemm"], "text": AFTER}]}],
            "silent": [],
            "claims": [{"verdict": "right", "rules": ["fp32_gemm"], "why": what}, FETCH_RIGHT]}),
        "postfix_fusion_after_dataloader": (Knobs(writer=_ew_job), {
            "problems": [{"id": "fusion_after_dataloader", "what": ew,
                          "any": [{"where": "finding", "rules": ["unfused_elementwise"],
                                   "text": rf"{EW_AFTER_MS:.2f} ms per step once the DataLoader"}]}],
            "silent": [],
            "claims": [{"verdict": "right", "rules": ["unfused_elementwise"], "why": ew}, FETCH_RIGHT]}),
        "postfix_host_op_twin": (Knobs(writer=partial(_job, fetch="aten::index_put_")), {
            "problems": [], "claims": [FP32_RIGHT],
            "silent": [{"id": "no_after_fix", "why": "the same 30 ms of host time is an op no single fix removes: "
                                                     "no gain is promised once it is gone",
                        "match": {"where": "finding", "text": NO_AFTER}}]}),
        "postfix_off_path_twin": (Knobs(writer=partial(_job, side_fp32=True)), {
            "problems": [], "claims": [FP32_RIGHT, FETCH_RIGHT],
            "silent": [{"id": "no_after_fix", "why": "once the fetch is gone the step is the fp16 stream's 20 ms; "
                                                     "the fp32 GEMM beside it is off the path even then",
                        "match": {"where": "finding", "text": NO_AFTER}}]}),
    }


def register(out: dict) -> None:
    out.update(recall_postfix_scenarios())
