"""Issue #34 recall, item()-sync (helper "itemsync"): the per-step blocking read or pageable upload that drains the
device queue (held_read), stated where it holds the host under 10 % of the step but starves the device after it,
and for a pageable index tensor copied then synchronised. Added to tests/expert/expectations.py's REAL (imported at
its end). Numbers from the events with plain gzip/json, independent of llmdiag (the arithmetic in each `why`).

hta/trace_diff/control (rank 3, 6 ProfilerSteps, mean 77.49 ms): per DtoH copy whose `cudaMemcpyAsync` held the host
(copy start inside the call, the hold = copy start - call start >= 0.1 ms, the copy under a tenth of it), grouped by
the annotations around the call: `## all2all_tw_data:wait ##` 34.40 ms / 6 = 5.73 ms per step; `## all2all_tw_data:init
##` (the `aten::item`) 3.60; `## all2all_id_list_score_data:init ##` 2.17. After each read, the device idle (no op on
any stream) from the copy's end to the start of the first op whose launch call began after the read's call returned,
at most the hold: 2.97 ms / 6 = 0.50 ms per step over every site (0.08 / 0.12 / 0.24 at those three).

torchrec sst_long_a2a_optimizer_3 / _5 / sst_sleep_pl_dense_after_backward_2: per `Memcpy HtoD (Pageable -> Device)`
whose `cudaMemcpyAsync` returned before it ran, the `cudaStreamSynchronize` next on that thread that holds the copy
(its start inside the sync, its end at most 50 µs past the sync's, a device clock behind the host's): the hold (copy
start - sync start) per ProfilerStep, 3 steps: _3 rank 3 31.73 ms, _5 rank 0 31.66 ms, the sleep set's ranks 0/1/3
629.26-629.38 ms (rank 2, the sleeper, 28.53), under `aten::index` (`aten::to` <- `aten::_to_copy` <- `aten::copy_`)."""

from __future__ import annotations

from tests.expert.expectations import REAL

ACT = r"[\s\S]*pin it \(`\.pin_memory\(\)`\) and copy it with `\.to\(device, non_blocking=True\)`"


def _add(name: str, problems: list[dict], claims: list[dict]) -> None:
    e = REAL[name]
    e["problems"] = e["problems"] + problems
    e["claims"] = claims + e["claims"]


_add("hta/trace_diff/control.json.gz", [
    {"id": "held_read_refill", "what": "the `item()` reads in `## sparse_data_dist ##` drain the queue once per step; "
                                       "the device idles 0.50 ms per step after such reads (truth B5 problem 3)",
     "any": [{"where": "finding", "rules": ["held_read"],
              "text": r"holds the host 5\.73 ms per step[\s\S]*0\.50 ms after every site's reads[\s\S]*"
                      r"`## all2all_tw_data:init ##` ← `## sparse_data_dist ##` \(`cudaMemcpyAsync`\) holds 3\.5\d ms"
                      r"[\s\S]*≈ 0\.50 ms per step"}]}], [
    {"verdict": "right", "rules": ["held_read"], "why": "5.73 ms/step held at the wait site, 0.50 ms/step idle after "
                                                       "the reads (events), low"}])
for _set, _rank, _ms in (("torchrec/sst_long_a2a_optimizer_3", 3, "31.66"),
                         ("torchrec/sst_long_a2a_optimizer_5", 0, "31.66")):
    _add(_set, [
        {"id": "pageable_index_sync", "what": "the pageable index copy in `aten::index` and the "
                                              "`cudaStreamSynchronize` after it, every step (truth A1/A2 problem 6)",
         "any": [{"where": "finding", "rules": ["held_read"], "min_severity": "low",
                  "text": rf"rank {_rank}: `cudaMemcpyAsync \+ cudaStreamSynchronize` of a host-to-device copy from "
                          rf"pageable memory[\s\S]*← `aten::index` holds the host {_ms} ms per step" + ACT}]}], [
        {"verdict": "right", "rules": ["held_read"], "why": "the pageable index upload and its sync, every step"}])
_add("torchrec/sst_sleep_pl_dense_after_backward_2", [], [
    {"verdict": "right", "rules": ["held_read"], "why": "629.38 ms/step held on rank 3 in the index sync, most of it "
                                                       "behind a collective waiting on rank 2 (said so), low"}])
_add("torchrec/sst_long_a2a_optimizer_5_qcomm", [], [
    {"verdict": "right", "rules": ["held_read"], "why": "the same pageable index sync (truth A3 problem 5), none now"}])
