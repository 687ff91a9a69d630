"""Planted scenarios for outlier steps (branch outlier, issue #34 recall: kineto resnet50_num_workers_4's step #9,
every host op slower with the same device work): in one mid-capture step every host op of a chore runs 3× longer,
spread over three op names, with a silent twin whose steps are all alike.

The chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py): a 5-us
kernel launched first (the step's device span starts at the same offset in every step), then N host ops, each
launching a 20-us kernel just before it ends, so the device idles between them while the host works. The exact
answer below is arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
OPS = ("aten::batch_norm", "aten::conv2d", "aten::relu")
N, OP_US, SLOW = 60, 300.0, 3.0  # 60 ops of 300 us (10 us apart); in the slow step each takes 3× as long
SLOW_STEP = 13  # the 4th of the 5 steps (10-14): not the capture's first
# The slow step is longer by N × (3 − 1) × 300 us = 36 ms on every rank, the other steps alike: the median step
# (over steps 11-14) is a typical one, so the excess is 36 ms in a capture of 5 steps: 7.2 ms per step
EXCESS_MS = N * (SLOW - 1) * OP_US / 1000
GAIN_MS = EXCESS_MS / 5
# each op name holds a third of it (12 ms): no one op holds most of the excess
PER_OP_MS = EXCESS_MS / len(OPS)


def _jitter(rk, k, facts, step, slow_step: int | None = SLOW_STEP):
    if step is None:
        return
    h = rk.h
    rk.cpu("aten::fill_", h, 4.0)
    rk.kernel(KERNEL, h + 2.0, 5.0, at=h + 1.0)
    dur = OP_US * (SLOW if step == slow_step else 1.0)
    t = h + 10.0
    for i in range(N):
        rk.cpu(OPS[i % len(OPS)], t, dur)
        rk.kernel(KERNEL, t + dur - 5.0, 20.0, at=t + dur - 10.0)
        t += dur + 10.0
    rk.h = t + 5.0
    rk.d = max(rk.d, t + 15.0)


# True of both: the chore's host ops hold the device idle between their 20-us kernels in every step
HOST_BOUND = {"verdict": "right", "rules": ["host_bound"], "why": "the device idles between the chore's host ops"}


def recall_outlier_scenarios() -> dict[str, tuple[Knobs, dict]]:
    g = GAIN_MS
    what = (f"step {SLOW_STEP}: {N} host ops (3 names) each 3× slower, the device work alike: +{EXCESS_MS:.0f} ms "
            f"in a capture of 5 steps, {g:.2f} ms per step")
    return {
        "outlier_host_jitter": (Knobs(chore=_jitter), {
            "problems": [{"id": "outlier_host_jitter", "what": what,
                          "any": [{"where": "finding", "rules": ["outlier_steps"], "gain_ms": [g - 0.01, g + 0.01],
                                   "step": SLOW_STEP,
                                   "text": r"\+36\.00 ms[\s\S]*the host[\s\S]*`aten::(batch_norm|conv2d|relu)`"
                                           r"[\s\S]*spread over 3 host ops"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["outlier_steps"], "gain_ms": [g - 0.01, g + 0.01],
                        "gain_outside": True, "why": f"the slow step costs {EXCESS_MS:.0f} ms over 5 steps"},
                       {"verdict": "right", "rules": ["outlier_steps"], "why": what}, HOST_BOUND]}),
        "outlier_host_jitter_twin": (Knobs(chore=partial(_jitter, slow_step=None)), {
            "problems": [], "claims": [HOST_BOUND],
            "silent": [{"id": "no_outlier_step", "why": "every step runs the same host ops at the same speed",
                        "match": {"where": "finding", "rules": ["outlier_steps"]}}]}),
    }


def register(out: dict) -> None:
    """Adds these scenarios, and says outlier_steps is right in `outlier_step` (planted_cases.py): its step 12
    runs every kernel 3× longer, the device compute that grew."""
    out.update(recall_outlier_scenarios())
    if "outlier_step" in out:
        out["outlier_step"][1]["claims"] = out["outlier_step"][1].get("claims", []) + [
            {"verdict": "wrong", "rules": ["outlier_steps"], "not_text": r"device compute \(gpu_compute_bound\) grew",
             "why": "step 12's kernels run 3× longer: device compute is what grew"},
            {"verdict": "right", "rules": ["outlier_steps"], "why": "step 12's kernels run 3× longer"}]
