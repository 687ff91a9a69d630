"""First-use loads (branch firstcall, issue #34 recall: B9-P2), added to tests/expert/expectations.py's REAL
(imported at its end). Numbers from the events: tests/real/test_first_use_real.py reads them with plain gzip/json."""

from __future__ import annotations

from tests.expert.expectations import REAL


def _firstcall() -> None:
    # tracelens b200_vllm: the lm_head `aten::mm` (the capture's only call of its shape) idles the GPU 1.67 ms with
    # a 35.8 us `Lazy Function Loading` starting inside it: first-use setup, with the four first calls of shapes.
    b = REAL["tracelens/b200_vllm_tp8_rank0.json.gz"]
    b["problems"] = b["problems"] + [
        {"id": "first_use_setup", "what": "one-time first calls in the pass (layer 0, lm_head): not per step",
         "any": [{"where": "finding", "rules": ["host_op_stall"],
                  "text": r"`aten::mm` 1\.68 ms \(called once; 1 first-use load in it\)"}]}]
    b["claims"] = [{"verdict": "right", "rules": ["host_op_stall"], "text": r"called once; 1 first-use load",
                    "why": "aten::mm called once, a Lazy Function Loading inside its 1.67 ms stall"}] + b["claims"]
    b["silent"] = b["silent"] + [{"id": "first_use_not_per_step", "why": "paid once: no per-step gain",
                                  "match": {"where": "finding", "rules": ["host_op_stall"], "min_severity": "medium"}}]


_firstcall()
