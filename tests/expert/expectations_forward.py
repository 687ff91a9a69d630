"""A forward-only capture of a training loop (issue #34 item 5; the fresh review of stop 42: A4 "never says the
capture is forward-only"), added to tests/expert/expectations.py's REAL (imported at its end). From the events
(truth_A.md A4, and tests/real/test_findings_real_rulefix.py): torchrec sst_sleep_pl_dense_after_backward_2's 4
ranks run `DistributedDataParallel.forward` and `Optimizer.zero_grad#Adagrad.zero_grad` in each profiled step, but
no `*Backward*` op, no `Optimizer.step#` and no all-reduce. Every other real set runs a backward (training) or has
no training sign (vLLM, inference): forward_only is silent there."""

from __future__ import annotations

from tests.expert.expectations import REAL

SLEEP = "torchrec/sst_sleep_pl_dense_after_backward_2"
RULE = {"where": "finding", "rules": ["forward_only"]}


def _forward() -> None:
    b = REAL[SLEEP]
    b["problems"] = b["problems"] + [
        {"id": "forward_only", "what": "the profiled steps hold no backward and no optimizer step: say so",
         "any": [dict(RULE, text=r"`DistributedDataParallel\.forward`[\s\S]*no autograd backward op[\s\S]*"
                                 r"on any of the 4 ranks")]}]
    b["claims"] = [{"verdict": "right", "rules": ["forward_only"],
                    "why": "DDP's forward and zero_grad run, no backward op or optimizer step in any file"}] + b["claims"]
    for name, exp in REAL.items():
        if name != SLEEP:
            exp["silent"] = exp["silent"] + [{"id": "no_forward_only", "match": RULE,
                                              "why": "a backward runs in the captured steps, or no training sign"}]


_forward()
