"""Planted scenarios for first-use loads (branch firstcall, issue #34 recall: b200_vllm's lm_head `aten::mm`, called
once in the capture, stalls 1.67 ms around a `Lazy Function Loading`), with a silent twin; every answer below is
arithmetic on the placed durations, written out by hand, not read back from llmdiag.

One rank, ProfilerSteps #10-#14, each as tests/expert/planted_recall_i.py's quiet step (42,880 µs: a 20 ms GEMM,
the backward's BCE and MUL of 40 µs, 10 MUL launching 30 µs kernels, a second 20 ms GEMM, a 2 ms optimizer kernel).
Step #10 only, after its BCE and MUL, runs one `aten::addmm` of STALL_US with nothing under it (the device idles all
5 ms: its next kernel is launched after it, from its thread); no other call of `aten::addmm` is in the capture, so
no later call says whether the stall is setup.
  loaded: a 40 µs `Lazy Function Loading` (the profiler's `overhead` event for a kernel the driver loads at its
    first launch) starts 1 ms into the stall: one-time setup, low, no gain, 5.00 ms of idle under 1 op shape.
  twin: the same stall without the load event: nothing in the events says first use, so it is no one-time setup
    (a 5.00 ms stall in 1 of 5 steps: 1.00 ms per step, below host_op_stall's 5 % floor of the ≈ 43.9 ms step)."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import A100, Knobs
from tests.expert.planted_recall_i import BCE, GEMM, MUL, OPT, SHORT_US, SMALL
from tests.gen.builder import TraceBuilder

STALL_US, LOAD_US = 5000, 40
ONE_TIME = r"one-time"
ONCE_MS = STALL_US / 1000


def _once_job(folder: str, prefix: str, lazy_load: bool) -> list[str]:
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"id": 0, **A100}])
    h = 0
    for s in range(5):
        k0 = h
        b.cpu_op("aten::mm", h + 2, 3)
        b.kernel(GEMM, h + 100, 20_000, launch_at=h + 3)
        h += 20_100
        for op in (BCE, MUL):
            b.cpu_op(op, h, SHORT_US)
            h += SHORT_US
        if s == 0:
            b.cpu_op("aten::addmm", h, STALL_US)
            if lazy_load:
                b.cpu_op("Lazy Function Loading", h + 1000, LOAD_US, tid=0, cat="overhead")
            h += STALL_US
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


def register(out: dict) -> None:
    """Adds the loaded stall and its twin."""
    once = (r"idle 5\.00 ms in all under the first call of 1 op shape \(`aten::addmm` 5\.00 ms \(called once; "
            r"1 first-use load in it\)\)")
    out["first_use_load_once"] = (Knobs(writer=partial(_once_job, lazy_load=True)), {
        "problems": [{"id": "one_time_load", "what": "aten::addmm, called once, stalls 5 ms in #10 around a kernel's "
                                                     "lazy load: one-time setup",
                      "any": [{"where": "finding", "rules": ["host_op_stall"], "text": once, "step": 10}]}],
        "silent": [{"id": "no_per_step_gain", "why": "paid once: no per-step gain",
                    "match": {"where": "finding", "rules": ["host_op_stall"], "min_severity": "medium"}}],
        "claims": [{"verdict": "right", "rules": ["host_op_stall"], "text": ONE_TIME, "why": "a first-use load"}]})
    out["first_use_no_load_twin"] = (Knobs(writer=partial(_once_job, lazy_load=False)), {
        "problems": [],
        "silent": [{"id": "not_one_time", "why": "no later call and no first-use event: nothing says setup",
                    "match": {"where": "finding", "text": ONE_TIME}}],
        "claims": [{"verdict": "misleading", "text": ONE_TIME, "why": "no event says first use"}]})
