"""A cache flush in the capture's first step (allocator_churn), added to tests/expert/expectations.py's REAL
(imported at its end). The fresh review (judged blind from the events): in sst_long_a2a_optimizer_3 / _5 213 of
222 ms and 269 of 275 ms of the allocator idle sit in step 4, the first captured step; the steady steps idle
3.7-7.6 ms (opt_3) and 1.8-4.8 ms (opt_5) per step inside allocator calls. Averaging the one flush into every
step called it 30-37 % of the step and rated it above rank 2's stall: misleading. Whether it recurs is outside
the capture, so the per-step gain is the steady steps' and the flush is told as paid once."""

from __future__ import annotations

from tests.expert.expectations import REAL

for _name, _steady in (("torchrec/sst_long_a2a_optimizer_3", (3.5, 8.0)),
                       ("torchrec/sst_long_a2a_optimizer_5", (1.5, 5.0))):
    REAL[_name]["claims"] = [
        {"verdict": "misleading", "rules": ["allocator_churn"], "min_severity": "high",
         "why": "the first captured step's flush averaged into every step: a one-off in this capture rated high"},
        {"verdict": "wrong", "rules": ["allocator_churn"], "gain_ms": list(_steady), "gain_outside": True,
         "why": f"steady steps idle {_steady[0]:g}-{_steady[1]:g} ms per step inside allocator calls; the step-4 "
                "flush is paid once in the capture"},
        {"verdict": "right", "rules": ["allocator_churn"], "text": r"paid once in this capture",
         "why": "the steady steps' allocator idle, the first step's flush told apart"},
    ] + REAL[_name]["claims"]
