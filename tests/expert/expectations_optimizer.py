"""Issue #34 recall: the host-heavy optimizer step (diagnose/rules/optimizer.py) in the real sets, added to
tests/expert/expectations.py's REAL (imported at its end).

Numbers from the events (python + gzip/json, independent of llmdiag), hta/sampled_pair (ranks 0 and 1 of 128,
event-sampled: kernels are dropped with their launch calls, every kept kernel has its kept call):
`Optimizer.step#Shampoo.step` user annotations of 190.9 / 198.9 ms (rank 0, steps 551/552) and 201.4 / 216.7 ms
(rank 1) of a 607-631 ms step, then `Optimizer.step#EMAOptimizer.step` of 13.1-13.6 ms (8 multi-tensor kernels,
0.3 ms of device time). Inside the Shampoo spans the device (all streams) is idle 110.9 / 81.1 ms (rank 0) and
100.1 / 44.3 ms (rank 1): 96.0 and 72.2 ms per step, 15.8 % and 11.8 % of the step; 27-31 kept launches per step
(tensordot/mm GEMMs, elementwise, `_foreach_*` ops) and a 42.5-67.8 ms `ncclKernel_SendRecv` (the parameter
all-gather) launched inside. The independent expert: ~200-230 ms of host per step, a 42-64 ms all-gather nothing
overlaps, then ~60 ms of the GPU waiting on the optimizer's tail. Dropped kernels can fill part of the idle, so
the events bound it from above (72-96 ms) and the expert's tail from below (~60 ms).

Shampoo's idle is 28.7 / 22.4 % of the ranks' device idle (334.0 / 322.0 ms per step, llmdiag's idle totals). The
other real sets' optimizer spans hold at most 6.5 % of the step as device idle (hta/nccl_data's SGD: 14.1 of 216 ms,
8.6 % of its 163.5 ms of idle, the host slow throughout, which host_bound names), the kineto ResNet-50 SGD steps (foreach=False,
483 launches, 21 ms of host per step) 0.2 ms: the device runs queued work through them."""

from __future__ import annotations

from tests.expert.expectations import REAL

SP = REAL["hta/sampled_pair"]
SP["problems"] = SP["problems"] + [
    {"id": "shampoo_host_step", "what": "Shampoo's step: ~195-209 ms of host per step, the GPU idle 72-96 ms per "
                                        "step inside it (an upper bound: sampled), its all-gather launched inside",
     "any": [{"where": "finding", "rules": ["optimizer_step"], "text": r"Shampoo.*sampl",
              "gain_ms": [50.0, 100.0]}]}]
SP["claims"] = [
    {"verdict": "right", "rules": ["optimizer_step"], "text": r"precondition_frequency", "gain_ms": [50.0, 100.0],
     "why": "device idle inside the Shampoo spans 96.0 / 72.2 ms per step (ranks 0 / 1, an upper bound from a "
            "sample); the expert: ~60 ms of the GPU waiting on the optimizer's tail"},
    {"verdict": "wrong", "rules": ["optimizer_step"], "gain_ms": [50.0, 100.0], "gain_outside": True,
     "why": "the events bound the optimizer's idle by 72-96 ms per step, the expert's tail is ~60"}] + SP["claims"]

for name in ("kineto/samples/resnet50_num_workers_0", "kineto/samples/resnet50_num_workers_4",
             "hta/nccl_data.json.gz", "hta/a100_16rank_alltoall_rank0.json.gz"):
    REAL[name]["silent"] = REAL[name]["silent"] + [
        {"id": "no_optimizer_step", "why": "the optimizer step's device idle is at most 6.5 % of the step (kineto "
                                           "SGD 0.2 ms, nccl_data 14.1 of 216 ms, a100 FusedAdam 1.4 ms)",
         "match": {"where": "finding", "rules": ["optimizer_step"]}}]
