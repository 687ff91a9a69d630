"""Planted scenarios for a forward-only capture of a training loop (issue #34 item 5: torchrec
sst_sleep_pl_dense_after_backward_2 runs `DistributedDataParallel.forward` and `Optimizer.zero_grad` but no
backward and no optimizer step in its profiled steps), with two silent twins; the answers are the placed ops.

One rank (A100), 4 steps of 10 ms: under `DistributedDataParallel.forward` (0-2,000 µs of each step) the host
launches 8 GEMMs of 1,000 µs at 100 + 10k µs that run back to back from 200 µs (the device busy 8 of 10 ms).
  forward: nothing else: DDP's forward, no `*Backward*` op, no `Optimizer.step#`: the finding, naming DDP's forward.
  twin_train: the same steps plus `autograd::engine::evaluate_function: MmBackward0` (8,300-8,400 µs) and
    `Optimizer.step#SGD.step` (9,000-9,200 µs): a whole training step, silent.
  twin_inference: the GEMMs under `aten::linear`, no DDP wrapper, no zero_grad: inference, silent."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import A100, GEMM as GEMMS_BY_DTYPE, Knobs
from tests.gen.builder import TraceBuilder

STEP_US, GEMM_US, GEMMS = 10_000, 1_000, 8
GEMM = GEMMS_BY_DTYPE["bf16"]
RULE = "forward_only"


def _job(folder: str, prefix: str, kind: str) -> list[str]:
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"id": 0, **A100}])
    for n in range(4):
        h = n * STEP_US
        b.step(n + 1, h, h + STEP_US)
        b.cpu_op("aten::linear" if kind == "inference" else "DistributedDataParallel.forward", h, 2_000)
        for k in range(GEMMS):
            b.kernel(GEMM, h + 200 + GEMM_US * k, GEMM_US, launch_at=h + 100 + 10 * k)
        if kind == "train":
            b.cpu_op("autograd::engine::evaluate_function: MmBackward0", h + 8_300, 100)
            b.cpu_op("Optimizer.step#SGD.step", h + 9_000, 200)
    os.makedirs(folder, exist_ok=True)
    return [b.write(os.path.join(folder, f"{prefix}_rank0.pt.trace.json.gz"))]


def register(out: dict) -> None:
    """Adds the forward-only capture and its two twins."""
    out["forward_only_capture"] = (Knobs(writer=partial(_job, kind="forward")), {
        "problems": [{"id": "forward_only", "what": "DDP's forward, no backward op and no optimizer step in any step",
                      "any": [{"where": "finding", "rules": [RULE],
                               "text": r"`DistributedDataParallel\.forward`[\s\S]*no autograd backward op[\s\S]*"
                                       r"no `Optimizer\.step#\.\.\.` on any of the 1 rank"}]}],
        "silent": [{"id": "no_gain", "why": "a caveat: nothing to gain", "match": {"where": "finding", "rules": [RULE],
                                                                                  "min_severity": "medium"}}],
        "claims": [{"verdict": "right", "rules": [RULE], "why": "the steps hold DDP's forward only"}]})
    silent = {"id": "not_forward_only", "why": "", "match": {"where": "finding", "rules": [RULE]}}
    out["forward_only_train_twin"] = (Knobs(writer=partial(_job, kind="train")), {
        "problems": [], "claims": [], "silent": [{**silent, "why": "backward and optimizer ops run in every step"}]})
    out["forward_only_inference_twin"] = (Knobs(writer=partial(_job, kind="inference")), {
        "problems": [], "claims": [], "silent": [{**silent, "why": "no training sign: inference"}]})
