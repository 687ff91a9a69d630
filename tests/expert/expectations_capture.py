"""Issue #34 recall, capture (helper "capture"): a small device-to-host read holding the host while queued device
work drains (held_read), and what an event-sampled capture supports (sampled_capture). Added to
tests/expert/expectations.py's REAL (imported at its end). Numbers from the events with plain gzip/json,
independent of llmdiag (the scripts' arithmetic written out in each `why`).

hta/a100_16rank_alltoall (ProfilerSteps 550-554): per step one `cudaMemcpyAsync` under `## sparse_data_dist ##`
whose `Memcpy DtoH (Device -> Pageable)` (704 bytes, 2 µs) starts 138.76 / 146.91 / 145.61 / 146.61 / 146.61 ms
after the call began (call start to copy start: the host held), plus one 64-B read held 0.24 / 0.30 / 0.23 / 0.26 /
0.01 ms: (724.50 + 1.04) / 5 = 145.1 ms per step at that site.

hta/trace_diff/test.json (rank 1, ProfilerSteps 1009-1014): `aten::item` -> `cudaMemcpyAsync` under
`## all2all_tw_data:init ##`, an 8-byte DtoH copy starting 19.35 / 38.26 / 41.82 / 0.06 / 21.87 / 42.02 ms after the
call: (163.38 - 0.06 under the 0.1-ms floor) / 6 = 27.2 ms per step, the longest 42.0 ms (the expert truth: "up to
42 ms host wait, does not cost GPU time now").

hta/sampled_pair: NCCL kernels' durations summed per step (2 steps): rank 0 396.2 / 2 = 198.1 ms, rank 1 379.0 / 2
= 189.5 ms (their union by launch step: 195.3 / 200.9 and 168.0 / 211.0 ms). Rank 0's `## backward ##` annotation
(top-level in the step) spans 232.1 ms per step, of which the union of its recorded `cpu_op` and `cuda_runtime`
events (any thread) covers 14 %: the backward is mostly unrecorded."""

from __future__ import annotations

from tests.expert.expectations import REAL


def _add(name: str, problems: list[dict], claims: list[dict]) -> None:
    e = REAL[name]
    e["problems"] = e["problems"] + problems
    e["claims"] = claims + e["claims"]


_add("hta/a100_16rank_alltoall_rank0.json.gz", [
    {"id": "held_read_704B", "what": "a 704-B DtoH read under `## sparse_data_dist ##` holds the host 145 ms/step "
                                     "while queued work drains: a dependency, not a slow copy",
     "any": [{"where": "finding", "rules": ["held_read"],
              "text": r"704 B[\s\S]*`aten::to` ← `## sparse_data_dist ##` holds the host 145\.\d\d ms per step"
                      r"[\s\S]*not for the copy[\s\S]*none now"}]}], [
    {"verdict": "right", "rules": ["held_read"], "why": "145.1 ms/step held by the 704-B read, device queued throughout"}])
_add("hta/trace_diff", [
    {"id": "held_read_item", "what": "`aten::item` (8 B) in `## all2all_tw_data:init ##` holds the host 27.2 ms/step "
                                     "(up to 42.0 ms), no GPU time now",
     "any": [{"where": "finding", "rules": ["held_read"],
              "text": r"8 B[\s\S]*`aten::item` ← `## all2all_tw_data:init ##`[\s\S]*27\.2\d ms per step"
                      r"[\s\S]*the longest 42\.0\d ms[\s\S]*none now"}]}], [
    {"verdict": "right", "rules": ["held_read"], "why": "27.2 ms/step held by the 8-B item() read"}])
_add("hta/sampled_pair", [
    {"id": "sampled_comm_floor", "what": "recorded NCCL kernels 189.5-198.1 ms per step: a lower bound from device "
                                         "events only, exposure not stated",
     "any": [{"where": "finding", "rules": ["sampled_capture"],
              "text": r"communication kernels alone run 189\.5\d ms \(rank 1\) to 198\.1\d ms \(rank 0\) per step"
                      r"[\s\S]*lower bound[\s\S]*exposed is not stated"}]},
    {"id": "sampled_backward_bare", "what": "rank 0's backward (232 ms/step) 14 % covered by recorded host ops: "
                                            "cannot be analysed, re-capture unsampled",
     "any": [{"where": "finding", "rules": ["sampled_capture"],
              "text": r"`## backward ##` 232\.\d\d ms per step, 14\.\d% of it covered[\s\S]*without sampling"}]}], [])
