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
    """Adds these scenarios, says outlier_steps is right in `outlier_step` (planted_cases.py): its step 12 runs
    every kernel 3× longer, the device compute that grew; and silent in `blocking_copy_hip_once`, whose step 12 is
    longer by one blocking copy (host_sync's)."""
    out.update(recall_outlier_scenarios())
    if "blocking_copy_hip_once" in out:  # one 493 ms blocking copy in step 12: host_sync names it, not this rule
        out["blocking_copy_hip_once"][1]["silent"] = out["blocking_copy_hip_once"][1].get("silent", []) + [
            {"id": "no_outlier_step_for_one_copy", "why": "the step's excess is one blocking copy's device idle, "
                                                          "host_sync's", "match": {"where": "finding", "rules": ["outlier_steps"]}}]
    out.update(gloo_iteration_scenarios())
    if "outlier_step" in out:
        out["outlier_step"][1]["claims"] = out["outlier_step"][1].get("claims", []) + [
            {"verdict": "wrong", "rules": ["outlier_steps"], "not_text": r"device compute \(gpu_compute_bound\) grew",
             "why": "step 12's kernels run 3× longer: device compute is what grew"},
            {"verdict": "right", "rules": ["outlier_steps"], "why": "step 12's kernels run 3× longer"}]


# One traced rank of a 64-rank gloo job, CPU-only: one ProfilerStep (#100) covering the first of 6 iterations; each
# iteration all-reduces two buckets on two gloo threads (150 ms and 140 ms), the 4th iteration's both take 200 ms
# longer, so that iteration runs 400 ms instead of 200 ms. The calls after the first: 150, 150, 350, 150, 150 ms
# (median 150); the iterations' periods 200, 200, 200, 400, 200 ms (the typical median 200): +200 ms in a capture of
# 6 iterations, 33.33 ms per iteration
ITER_MS, SLOW_ITER, ITERS, EXTRA_MS = 200.0, 3, 6, 200.0
ITER_GAIN_MS = EXTRA_MS / ITERS


def _gloo_writer(folder: str, prefix: str, slow: int | None = SLOW_ITER) -> list[str]:
    import os

    from tests.gen.builder import TraceBuilder
    b = TraceBuilder(rank=3, world_size=64, backend="gloo")
    b.thread_name(100, "pt_main_thread")
    b.step(100, 0, int(ITER_MS * 1000))
    t = 10_000
    for k in range(ITERS):
        extra = int(EXTRA_MS * 1000) if k == slow else 0
        b.gloo("all_reduce", t, 150_000 + extra, tid=200, dims=[321271])
        b.gloo("all_reduce", t + 5_000, 140_000 + extra, tid=201, dims=[2082411])
        t += int(ITER_MS * 1000) + extra
    os.makedirs(folder, exist_ok=True)
    return [b.write(os.path.join(folder, f"{prefix}_rank3.pt.trace.json"))]


def gloo_iteration_scenarios() -> dict[str, tuple[Knobs, dict]]:
    g = ITER_GAIN_MS
    what = (f"iteration {SLOW_ITER + 1} of {ITERS}: both gloo all-reduces {EXTRA_MS:.0f} ms longer, outside the one "
            f"ProfilerStep: +{EXTRA_MS:.0f} ms, {g:.2f} ms per iteration")
    return {
        "outlier_gloo_iteration": (Knobs(writer=_gloo_writer), {
            "problems": [{"id": "outlier_gloo_iteration", "what": what,
                          "any": [{"where": "finding", "rules": ["outlier_steps"], "gain_ms": [g - 0.01, g + 0.01],
                                   "text": r"call 4[\s\S]*\+200\.00 ms[\s\S]*1 other repeated collective"
                                           r"[\s\S]*outside the analysed steps[\s\S]*late peer"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["outlier_steps"], "gain_ms": [g - 0.01, g + 0.01],
                        "gain_outside": True, "why": f"the slow iteration costs {EXTRA_MS:.0f} ms over {ITERS}"},
                       {"verdict": "right", "rules": ["outlier_steps"], "why": what}, CPU_ONLY]}),
        "outlier_gloo_iteration_twin": (Knobs(writer=partial(_gloo_writer, slow=None)), {
            "problems": [], "claims": [CPU_ONLY],
            "silent": [{"id": "no_outlier_iteration", "why": "every iteration's all-reduces take the same time",
                        "match": {"where": "finding", "rules": ["outlier_steps"]}}]}),
    }


CPU_ONLY = {"verdict": "right", "rules": ["contaminated_timings"], "why": "a CPU-only (gloo) trace"}
