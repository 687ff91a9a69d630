"""Planted scenarios for issue #34's recall (part e): a host-heavy optimizer step (hta/sampled_pair's distributed
Shampoo: ~200 ms of host time per step, the GPU idle through much of it) with silent twins: a fused optimizer whose
span keeps the device busy, and a short optimizer step.

Each chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py); the
exact answers below are arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

TINY = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, at::detail::Array<char*, 2> >"
MULTI = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, float*, float, float, float, float, float, float, bool, bool, bool*, bool*>"

N, OP_US, K_US = 200, 150.0, 5.0
# `Optimizer.step#SGD.step` (foreach=False): 200 aten::add_ ops of 150 us, each launching one 5-us kernel; the span
# is 200 x 150 + 10 = 30,010 us, the device busy 200 x 5 = 1,000 us inside it: 29.01 ms of idle per step
IDLE_MS = (N * OP_US + 10.0 - N * K_US) / 1000
HOST_MS = (N * OP_US + 10.0) / 1000
SHORT_N = 10  # the short twin: 10 ops, a 1.51 ms span, 1.46 ms of idle per step (under 5 % of any planted step)
FUSED_KERNELS = 4  # the fused twin: 4 multi-tensor kernels back to back over the whole span (idle 10 us per step)


def _step(rk, k, facts, step, n: int = N, name: str = "Optimizer.step#SGD.step", fused: bool = False):
    if step is None:
        return
    h = rk.h
    span = n * OP_US + 10.0
    rk.cpu(name, h, span, cat="user_annotation")
    if fused:
        each = (span - 10.0) / FUSED_KERNELS
        for i in range(FUSED_KERNELS):
            rk.cpu("aten::_fused_adamw_", h + 5.0 + i, 1.0)
            rk.kernel(MULTI, h + 10.0 + i * each, each, at=h + 5.0 + i)
    else:
        for i in range(n):
            t = h + 5.0 + i * OP_US
            rk.cpu("aten::add_", t, OP_US - 2.0)
            rk.kernel(TINY, t + 10.0, K_US, at=t + 3.0)
    rk.h = h + span + 5.0
    rk.d = max(rk.d, rk.h - 20.0)


def recall_e_scenarios() -> dict[str, tuple[Knobs, dict]]:
    g = IDLE_MS
    rng = [g - 0.01, g + 0.01]
    what = (f"`Optimizer.step#SGD.step` of {HOST_MS:.2f} ms per step launching {N} {K_US:g}-us kernels (one per "
            f"parameter): {g:.2f} ms of device idle inside it")
    return {
        "optimizer_host_loop": (Knobs(chore=_step), {
            "problems": [{"id": "optimizer_step", "what": what,
                          "any": [{"where": "finding", "rules": ["optimizer_step"], "gain_ms": rng,
                                   "text": r"SGD.*foreach=True"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["optimizer_step"], "gain_ms": rng, "gain_outside": True,
                        "why": f"the planted idle inside the span is {g:.3f} ms per step"},
                       {"verdict": "right", "rules": ["optimizer_step"], "why": what},
                       {"verdict": "right", "rules": ["host_bound"],
                        "why": f"the device waits {g:.2f} ms per step for the optimizer's per-parameter host ops: "
                               "host-bound by construction (the same idle: optimizer_step's gain is counted once)"}]}),
        "optimizer_fused_twin": (Knobs(chore=partial(_step, name="Optimizer.step#AdamW.step", fused=True)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_optimizer_step", "why": f"the same {HOST_MS:.2f} ms span, {FUSED_KERNELS} fused "
                                                          "kernels keep the device busy through it",
                        "match": {"where": "finding", "rules": ["optimizer_step"]}}]}),
        "optimizer_short_twin": (Knobs(chore=partial(_step, n=SHORT_N)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_optimizer_step", "why": f"a {SHORT_N}-op step: "
                                                          f"{(SHORT_N * (OP_US - K_US) + 10) / 1000:.2f} ms of idle",
                        "match": {"where": "finding", "rules": ["optimizer_step"]}}]}),
    }
