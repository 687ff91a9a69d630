"""The fresh review's three misleading findings (branch rulefix), added to tests/expert/expectations.py's REAL
(imported at its end). Numbers from the events: tests/real/test_findings_real_rulefix.py reads them with plain
gzip/json."""

from __future__ import annotations

from tests.expert.expectations import REAL


def _rulefix() -> None:
    # hta/trace_diff/control: the ~2.1-2.4 ms host-only gap at the start of `## backward ##` comes in #1009
    # (MulBackward0 2.41 ms), #1010 (MulBackward0 again, 2.14 ms) and #1011 (BCEWithLogitsBackward0 2.38 ms), not in
    # #1012-#1014; at step ~1000 of a long run the op's "first call" in the capture is no first call.
    c = REAL["hta/trace_diff/control.json.gz"]
    c["claims"] = [{"verdict": "misleading", "rules": ["host_op_stall"], "text": r"one-time",
                    "why": "the stall recurs: MulBackward0 2.41 ms in #1009 and 2.14 ms in #1010, BCEWithLogits"
                           "Backward0 2.38 ms in #1011, at the same place (the backward's start)"}] + c["claims"]
    c["silent"] = c["silent"] + [{"id": "no_one_time_setup", "why": "the 2.4 ms stall recurs in #1010 and #1011",
                                  "match": {"where": "finding", "text": r"one-time"}}]
    # kineto resnet50, num_workers=0 (newest capture): the device idles 31.9-46.1 ms of each 149-159 ms step inside
    # the single-process DataLoader's `__next__` (44-47 ms spans): a larger batch grows that with it.
    r = REAL["kineto/samples/resnet50_num_workers_0"]
    r["claims"] = [{"verdict": "misleading", "rules": ["memory_unused"], "text": r"raise the microbatch",
                    "why": "steps wait 32-46 ms on a single-process DataLoader; a larger batch scales its time"},
                   {"verdict": "right", "rules": ["memory_unused"], "text": r"waiting for the DataLoader",
                    "why": "2.6 GiB of 31.7 used; the batch left alone while the loader sets the step"}] + r["claims"]
    r["silent"] = r["silent"] + [{"id": "no_batch_advice", "why": "DataLoader-bound: 22-30 % of each step idle in it",
                                  "match": {"where": "finding", "text": r"raise the microbatch"}}]
    # hta/cpu_only_rank-34: the first gloo all-reduce pair's union inside ProfilerStep#551 is 178.78 ms of 210.11
    # (85.1 %): what fewer exchanges could at most save. No gain and low understates it by two levels.
    u = REAL["hta/cpu_only_rank-34.pt.trace.json.gz"]
    u["claims"] = [{"verdict": "misleading", "rules": ["comm_latency_bound"], "gain_ms": [178.7, 178.85],
                    "gain_outside": True, "why": "the all-reduces hold 85 % of the step exposed: low with no gain "
                                                 "understates it"}] + u["claims"]


_rulefix()
