"""Issue #34 recall (branch actckpt): activation checkpointing's recomputed forward on a real trace. Adds to
expectations.py's REAL. Numbers from the events (python + gzip/json, independent of llmdiag).

tracelens/mi300_ddp8_actckpt (ProfilerSteps 15-17): 4 `torch/utils/checkpoint.py(1500): recompute_fn` python_function
spans per step in backward (non-reentrant checkpoint under `checkpoint_wrapper`); the device ops launched by runtime
calls on their thread inside them (by correlation id): 53 / 53 / 53 / 46 per step, 1.414 / 1.390 / 1.407 ms of device
time per step (mean 1.40; BN statistics, layout transposes and the recomputed NHWC convolutions), 7.4 % of the
18.84 ms device step; with no RCCL kernel running meanwhile (the rest lies under the first bucket's all-reduce,
which bounds the step) 0.356 / 0.350 / 0.356 ms per step (mean 0.354): the gain while communication bounds the step,
the whole 1.40 ms once it does not. The trace holds no `[memory]` events (profile_memory off): the headroom is not read, so the
finding states the cost, says the memory is unread and asks for a memory reading before dropping checkpoints.
"""

from __future__ import annotations

from tests.expert.expectations import REAL

_B10 = REAL["tracelens/mi300_ddp8_actckpt_rank0.json.gz"]
_B10["problems"] = _B10["problems"] + [
    {"id": "activation_recompute", "what": "activation checkpointing recomputes 4 segments' forward in backward: "
                                           "1.39-1.41 ms of device time per step; memory not profiled",
     "any": [{"where": "finding", "rules": ["activation_recompute"],
              "text": r"recompute_fn[\s\S]*1\.40 ms of GPU time[\s\S]*no device memory[\s\S]*not read"}]}]
_B10["claims"] = [
    {"verdict": "wrong", "rules": ["activation_recompute"], "gain_ms": [0.34, 0.37], "gain_outside": True,
     "why": "the recomputed forward's device time with no collective running is 0.350-0.356 ms per step (mean "
            "0.354; 1.40 in all, the rest under an all-reduce that bounds the step)"},
    {"verdict": "right", "rules": ["activation_recompute"], "why": "recompute_fn spans and their kernels, memory unread"},
] + _B10["claims"]
for _name, _e in REAL.items():
    if _name != "tracelens/mi300_ddp8_actckpt_rank0.json.gz":
        _e["silent"].append({"id": "no_activation_recompute", "why": "no torch.utils.checkpoint recompute_fn span",
                             "match": {"where": "finding", "rules": ["activation_recompute"]}})
