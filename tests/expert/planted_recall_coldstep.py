"""Planted scenarios for a capture of cold steps only (branch coldstep, issue #34 recall: hta amd_mi250_minitoy holds
one iteration, ProfilerStep#1, whose one `hipLaunchKernel` loads its kernel for 6.5 ms, then the profiler's stop),
with two silent twins; every answer below is arithmetic on the placed durations, written out by hand, not read back
from llmdiag.

One rank (A100), eager ops of a small step: each op a 150 µs `aten::mul` on the host, 200 µs apart, whose 1 µs
`cudaLaunchKernel` at +140 µs queues a 6 µs kernel at +145 µs (the device idles ~194 µs between kernels: host-bound).
A step: 5 such ops, then `aten::add_`, then 5 more (11 kernels).
  cold: ProfilerStep#1 only, its `aten::add_` [1100, 6300] µs holding a `cudaLaunchKernel` [1150, 6150] (the
    kernel's first launch: code loading) whose kernel runs at 6160; then ProfilerStep#2 [7600, 7650] with no event
    (the profiler's stop: no step). The step's device window is the first kernel's start (245) to the last's end
    (6400 + 4 × 200 + 145 + 6 = 7351): 7.106 ms. The launch call lies inside the device's idle [1051, 6160]: 5.000 ms
    one-time. The rest of the path: 7.106 − 5.000 = 2.106 ms. The GPU is busy 11 × 6 µs = 0.066 ms: 3.1 % of the
    rest (0.066 / 2.106 = 3.13 %), 0.9 % of the step (0.066 / 7.106 = 0.93 %). The device can be on the path only
    while a kernel runs or waits after its launch (11 × 6 + 10 × 4 + 10 µs = 116 µs), so the host holds at least
    (2.106 − 0.116) / 2.106 = 94.5 % of the rest; the launch calls besides the first take 10 × 1 µs = 0.01 ms.
  twin_steady: the same ProfilerStep#1, then ProfilerStep#2-#6 warm (the same ops, `aten::add_` a 150 µs op like
    the others): five steps pay no one-time cost, so the capture is not cold only: silent.
  twin_warm: ProfilerStep#3-#7 warm only (a `schedule(wait=1, warmup=2, active=5)` capture): silent."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import A100, ELEMENTWISE, Knobs
from tests.gen.builder import MAIN_TID, TraceBuilder

OP_US, PERIOD_US, CALL_AT, KERNEL_AT, KERNEL_US = 150, 200, 140, 145, 6
STALL_OP_US, CALL_US, CALL_OFF, KERNEL_OFF = 5200, 5000, 50, 5060  # the first launch, from its op's start
COLD_US, WARM_US = 7500, 11 * PERIOD_US + 100
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, " \
      "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >"


def _op(b: TraceBuilder, name: str, kernel: str, t: int) -> None:
    b.cpu_op(name, t, OP_US)
    b.kernel(kernel, t + KERNEL_AT, KERNEL_US, launch_at=t + CALL_AT)


def _step(b: TraceBuilder, n: int, h: int, cold: bool) -> int:
    """ProfilerStep#n from host time h; returns its end."""
    t = h + 100
    for _ in range(5):
        _op(b, "aten::mul", MUL, t)
        t += PERIOD_US
    if cold:  # a 5 ms launch call: the kernel's code loaded at its first launch
        b.cpu_op("aten::add_", t, STALL_OP_US)
        b.kernel(ELEMENTWISE, t + KERNEL_OFF, KERNEL_US, launch=False)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": b.pid, "tid": MAIN_TID,
               "ts": b._abs(t + CALL_OFF), "dur": CALL_US, "args": {"External id": b._ext, "correlation": b._corr}})
        t += STALL_OP_US + 100
    else:
        _op(b, "aten::add_", ELEMENTWISE, t)
        t += PERIOD_US
    for _ in range(5):
        _op(b, "aten::mul", MUL, t)
        t += PERIOD_US
    end = h + (COLD_US if cold else WARM_US)
    b.step(n, h, end)
    return end


def _job(folder: str, prefix: str, cold_first: bool, steps: list[int], stub: bool) -> list[str]:
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"id": 0, **A100}])
    h = 0
    for i, n in enumerate(steps):
        h = _step(b, n, h, cold_first and i == 0) + 100
    if stub:
        b.step(steps[-1] + 1, h, h + 50)
    os.makedirs(folder, exist_ok=True)
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


COLD = "cold_capture"
TEXT = (r"holds 1 step \(ProfilerStep#1, among the profiler's first 3 steps, #0-#2\)[\s\S]*`cudaLaunchKernel` "
        r"5\.00 ms in step 1[\s\S]*critical path, 2\.11 ms of 7\.11 ms, is (9[4-9]\.\d|100\.0)% host[\s\S]*runtime calls 0\.0[01] ms"
        r"[\s\S]*busy 0\.07 ms per step \(3\.1% of that rest, 0\.9% of the whole step\); 11 kernels per step, median "
        r"6\.0 µs, 100\.0% under 10 µs, whose launch calls take 0\.01 ms per step besides the one-time ones")


FIRST_LAUNCH = {"verdict": "right", "rules": ["host_op_stall"], "text": r"first launch[\s\S]*none in steady state",
                "why": "the 5 ms launch call in step 1 is the planted first launch: no steady-state gain"}


def register(out: dict) -> None:
    """Adds the cold capture and its two twins."""
    out["cold_capture_only"] = (Knobs(writer=partial(_job, cold_first=True, steps=[1], stub=True)), {
        "problems": [{"id": "cold_only", "what": "one cold step (a 5 ms first launch), host-bound once it is set "
                                                 "aside: steady state unmeasured",
                      "any": [{"where": "finding", "rules": [COLD], "text": TEXT, "step": 1}]}],
        "silent": [{"id": "no_gain_claimed", "why": "no steady step: no gain can be read",
                    "match": {"where": "finding", "rules": [COLD], "min_severity": "medium"}},
                   {"id": "stub_no_step", "why": "ProfilerStep#2 holds no event: the profiler's stop",
                    "match": {"where": "finding", "text": r"over the 2 profiled steps|steps 1[–-]2"}}],
        "claims": [{"verdict": "right", "rules": [COLD], "text": r"host-bound[\s\S]*larger batch",
                    "why": "the rest of the cold step is host-bound; the gain is not stated"}, FIRST_LAUNCH],
        "headline": [{"id": "one_step", "field": "step_numbers", "equals": [1],
                      "why": "ProfilerStep#2 records no event: the profiler's stop, no step"}]})
    silent = {"id": "not_cold_only", "why": "steady steps are in the capture",
              "match": {"where": "finding", "rules": [COLD]}}
    out["cold_capture_then_steady_twin"] = (
        Knobs(writer=partial(_job, cold_first=True, steps=[1, 2, 3, 4, 5, 6], stub=False)),
        {"problems": [], "claims": [FIRST_LAUNCH], "silent": [silent]})
    out["cold_capture_warm_twin"] = (Knobs(writer=partial(_job, cold_first=False, steps=[3, 4, 5, 6, 7], stub=True)),
                                     {"problems": [], "claims": [], "silent": [silent]})
