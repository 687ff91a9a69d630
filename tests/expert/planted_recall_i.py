"""Planted scenarios for the fresh review's three misleading findings (branch rulefix), each with a silent twin;
every answer below is arithmetic on the placed durations, written out by hand, not read back from llmdiag.

1. A "first call of a shape" whose stall comes back in later steps is no one-time setup (rules/one_time.py).
2. Unused memory on a job whose device waits for the DataLoader gets no larger-batch advice (rules/memory.py).
3. A latency-bound gloo all-reduce's exposed time is its gain, a bound (rules/comm_latency.py)."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import A100, Knobs
from tests.expert.planted_recall_f import _gloo_job
from tests.gen.builder import TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
SMALL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, at::detail::Array<char*, 3> >"
MUL = "autograd::engine::evaluate_function: MulBackward0"
BCE = "autograd::engine::evaluate_function: BinaryCrossEntropyWithLogitsBackward0"
OPT = "Optimizer.step#SGD.step"
STALL_US, SHORT_US = 5000, 40

# 1. One rank, ProfilerSteps #10-#14. Each step, from its start h (µs): `aten::mm` launching a 20 ms GEMM at h + 100;
# at h + 20,100 (the GEMM just ended) the backward opens with BCE then MUL, each SHORT_US unless the step stalls in
# it (STALL_US, nothing under it: the device idles the whole 5 ms), then 10 MUL of 40 µs each launching a 30 µs
# kernel, an `aten::mm` launching a second 20 ms GEMM, the optimizer (a 2 ms kernel). A quiet step is 20,100 + 40 +
# 40 + 500 + 20,100 + 2,100 = 42,880 µs; a stalled one 4,960 µs longer. MUL's first call on the rank is step #10's
# backward MUL; its later calls are 40 µs (their median: 0.04 ms ≤ a fifth of 5 ms): a first call by the metric.
#   recurring: stalls under MUL in #10 (its first call) and #11, under BCE in #12 (BCE's first call is #10's 40 µs
#     one): the step pays it in 3 of 5 steps. ProfilerSteps of 47.84 (3) and 42.88 ms (2), ≈ 45.7 ms a step, the
#     5 % floor ≈ 2.28 ms; the stalls 3 × 5.00 / 5 = 3.00 ms per step (≈ 6.6 %: medium). Before rules/one_time.py
#     #10's stall was "one-time" and the rest, 2 × 5.00 / 5 = 2.00 ms, under the floor: "one-time setup" it said.
#   twin: only #10 stalls (the first call), later MUL calls 40 µs: a one-time setup, low, no gain.
RECUR_STALLS = {0: MUL, 1: MUL, 2: BCE}
ONCE_STALLS = {0: MUL}
FIRST_CALL_MS = 3 * STALL_US / 1000 / 5


def _stall_job(folder: str, prefix: str, stalls: dict) -> list[str]:
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"id": 0, **A100}])
    h = 0
    for s in range(5):
        k0 = h
        b.cpu_op("aten::mm", h + 2, 3)
        b.kernel(GEMM, h + 100, 20_000, launch_at=h + 3)
        h += 20_100
        for op in (BCE, MUL):
            d = STALL_US if stalls.get(s) == op else SHORT_US
            b.cpu_op(op, h, d)
            h += d
        for i in range(10):
            t = h + 50 * i
            b.cpu_op(MUL, t, SHORT_US)
            b.kernel(SMALL, t + 30, 30, launch_at=t + 20)
        h += 500
        b.cpu_op("aten::mm", h, 3)
        b.kernel(GEMM, h + 100, 20_000, launch_at=h + 1)
        h += 20_100
        b.cpu_op(OPT, h, 100)
        b.kernel(SMALL, h + 30, 2000, launch_at=h + 20)
        h += 2_100
        b.step(10 + s, k0, h)
    os.makedirs(folder, exist_ok=True)
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


# 2. One A100 rank (80 GiB: 0.85 x 80 = 68 GiB), 4 steps of 20 ms. Each step from k0: a single-process DataLoader
# `__next__` for LOADER_US (the device idle: nothing queued), `aten::mm` launching a GEMM [k0 + 6,100, + 12,100],
# a backward op launching one [12,200, 18,200], the optimizer one [18,300, 19,900]. [memory] events: 2 GiB allocated
# at each step's start, 4 GiB at its peak (k0 + 9,000), 2 GiB again at k0 + 19,950: activations 4 − 2 = 2 GiB,
# baseline 2 GiB, k = ⌊(68 − 2) / 2⌋ = 33.
#   loader-bound: LOADER_US 6,000: the device idles 6.0 ms of each 20 ms step in the loader (30 %, ≥ 5 %): the
#     headroom is stated, no batch advice.
#   twin: LOADER_US 200 (1 % of the step): "raise the microbatch 33x".
GIB = 2**30


def _loader_job(folder: str, prefix: str, loader_us: int) -> list[str]:
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"id": 0, **A100}])
    step = 20_000
    for s in range(4):
        k0 = s * step
        b.step(1 + s, k0, k0 + step)
        b.memory(k0 + 1, 2 * GIB, 6 * GIB)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", k0, loader_us)
        a = k0 + loader_us
        b.cpu_op("aten::mm", a + 2, 5)
        b.kernel(GEMM, a + 100, 6000, launch_at=a + 4)
        b.memory(k0 + 9000, 4 * GIB, 6 * GIB)
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", k0 + 12_100, 10)
        b.kernel(GEMM, max(k0 + 12_200, a + 6100), 6000, launch_at=k0 + 12_105)
        b.cpu_op(OPT, k0 + 18_200, 10)
        b.kernel(SMALL, k0 + 18_300, 1600, launch_at=k0 + 18_205)
        b.memory(k0 + 19_950, 2 * GIB, 6 * GIB)
    os.makedirs(folder, exist_ok=True)
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


BATCH = r"raise the microbatch"
ONE_TIME = r"one-time"


def recall_i_scenarios() -> dict[str, tuple[Knobs, dict]]:
    recurs = ("a 5 ms host stall at the start of the backward in steps #10, #11 (MulBackward0, its first call in "
              "#10) and #12 (BCEWithLogitsBackward0): 3.00 ms per step, not a one-time setup")
    return {
        "first_call_recurs": (Knobs(writer=partial(_stall_job, stalls=RECUR_STALLS)), {
            "problems": [{"id": "recurring_stall", "what": recurs,
                          "any": [{"where": "finding", "rules": ["host_op_stall"], "min_severity": "medium",
                                   "gain_ms": [FIRST_CALL_MS - 0.01, FIRST_CALL_MS + 0.01]}]}],
            "silent": [{"id": "not_one_time", "why": "the stall comes back in #11 (same op) and #12",
                        "match": {"where": "finding", "text": ONE_TIME}}],
            "claims": [{"verdict": "misleading", "rules": ["host_op_stall"], "text": ONE_TIME,
                        "why": "a stall paid in 3 of 5 steps called one-time setup"},
                       {"verdict": "wrong", "rules": ["host_op_stall"], "gain_ms": [FIRST_CALL_MS - 0.01,
                                                                               FIRST_CALL_MS + 0.01],
                        "gain_outside": True, "why": "3 stalls of 5.00 ms in 5 steps: 3.00 ms per step"},
                       {"verdict": "right", "rules": ["host_op_stall"], "why": recurs}]}),
        "first_call_once_twin": (Knobs(writer=partial(_stall_job, stalls=ONCE_STALLS)), {
            "problems": [{"id": "one_time", "what": "MulBackward0's first call stalls 5 ms in #10 only",
                          "any": [{"where": "finding", "rules": ["host_op_stall"], "text": ONE_TIME, "step": 10}]}],
            "silent": [{"id": "no_per_step_gain", "why": "paid once: no per-step gain",
                        "match": {"where": "finding", "rules": ["host_op_stall"], "min_severity": "medium"}}],
            "claims": [{"verdict": "right", "rules": ["host_op_stall"], "text": ONE_TIME, "why": "first call only"}]}),
        "memory_unused_loader_bound": (Knobs(writer=partial(_loader_job, loader_us=6000)), {
            "problems": [{"id": "headroom", "what": "4 GiB of 80 used; the device idles 6 of 20 ms per step in "
                                                    "the DataLoader",
                          "any": [{"where": "finding", "rules": ["memory_unused"],
                                   "text": r"idles 6\.00 ms of its [\d.]+ ms step \(\d+\.\d%\) waiting for the DataLoader"}]}],
            "silent": [{"id": "no_batch_advice", "why": "a larger batch grows the loader's time with it",
                        "match": {"where": "finding", "text": BATCH}}],
            "claims": [{"verdict": "right", "rules": ["memory_unused"], "why": "headroom, no batch advice"},
                       {"verdict": "right", "rules": ["dataloader"], "why": "30 % of the step in the loader"}]}),
        "memory_unused_device_bound_twin": (Knobs(writer=partial(_loader_job, loader_us=200)), {
            "problems": [{"id": "batch_advice", "what": "4 GiB of 80 used, the device busy: a 33x microbatch fits",
                          "any": [{"where": "finding", "rules": ["memory_unused"], "text": BATCH + r" 33×"}]}],
            "silent": [{"id": "no_loader_caveat", "why": "the loader holds 1 % of the step",
                        "match": {"where": "finding", "rules": ["memory_unused"], "text": r"DataLoader"}}],
            "claims": [{"verdict": "right", "rules": ["memory_unused"], "why": "33x the activations fit"}]}),
        # 3. planted_recall_f's gloo job (2 x 170 ms all-reduces over 300 ranks per 200 ms step, union [10, 185] ms):
        # the exposed 175.00 ms per step (87.5 %) is the bound: high. Its bandwidth twin stays silent there.
        "gloo_latency_gain": (Knobs(writer=partial(_gloo_job, sizes=(321_271, 2_082_411))), {
            "problems": [{"id": "latency_gain", "what": "exposed 175 ms of the 200 ms step: the bound, high",
                          "any": [{"where": "finding", "rules": ["comm_latency_bound"], "min_severity": "high",
                                   "gain_ms": [174.99, 175.01], "text": r"up to 175\.00 ms per step"}]}],
            "silent": [],
            "claims": [{"verdict": "misleading", "rules": ["comm_latency_bound"], "gain_ms": [174.99, 175.01],
                        "gain_outside": True, "why": "87.5 % of the step exposed: no gain, rated low"},
                       {"verdict": "right", "rules": ["comm_latency_bound"], "why": "bound = the exposed time"},
                       {"verdict": "right", "rules": ["contaminated_timings"], "why": "CPU only by construction"}]}),
    }
