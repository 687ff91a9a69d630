"""Issue #34 recall on the recommendation-system class (branch recall1), added to tests/expert/expectations.py's
REAL (imported at its end). Numbers established from the events."""

from __future__ import annotations

from tests.expert.expectations import REAL


# ---- recall1 (issue #34: recall on the recommendation-system class; established from the events) ----
def _recall1() -> None:
    sleep = REAL["torchrec/sst_sleep_pl_dense_after_backward_2"]
    sleep["problems"].append(
        {"id": "allocator_flush_5", "what": "step 5 releases and refills the cache: 14 cudaFree + 16 cudaMalloc on "
                                            "every rank, 98-102 ms of device idle inside them (41 ms per step over "
                                            "3 steps, under 5 % of the 1.1 s steps rank 2's stall makes)",
         "any": [{"where": "finding", "rules": ["allocator_churn"], "text": r"mid-capture", "step": 5}]})
    sleep["claims"].insert(0, {"verdict": "wrong", "rules": ["allocator_churn"], "gain_ms": [37.0, 43.0],
                               "gain_outside": True,
                               "why": "the flush's 98-102 ms in 3 steps: 33-34 ms per step, 37-41 with steps 4 "
                                      "and 6's cudaMalloc idle (the mean over the steps, a bound)"})
    for name in ("torchrec/sst_long_a2a_optimizer_3", "torchrec/sst_long_a2a_optimizer_5"):
        REAL[name]["problems"].append(
            {"id": "forward_stall_r2", "what": "rank 2's main thread sits 20.2 ms per step with no event inside "
                                               "`# running sparse arch`, right before its forward `_AlltoAllSingle` "
                                               "(peers 0.04-0.06 ms; its device idle 18.3 ms of it), as well as "
                                               "20.3 ms in `_AlltoAllSingleBackward` on the autograd thread",
             "any": [{"where": "finding", "rules": ["stragglers"], "rank": 2,
                      "text": r"running sparse arch` on `[^`]+`, 20\.2\d ms per step"}]})
    REAL["torchrec/sst_long_a2a_optimizer_5_qcomm"]["headline"].append(
        {"id": "other_run_named", "field": "headline_text",
         "regex": r"run 2 of 2 in this input \(started 2023-11-02 21:02:20 UTC; not analysed: run 1\b",
         "why": "the folder holds two runs (pids 54105-54108 from 20:59:27, 55988-55991 from 21:02:20 UTC); the "
                "headline names the one analysed and the other, not only a warning among the issues"})
    REAL["torchrec/sst_long_a2a_optimizer_5_qcomm"]["problems"].append(
        {"id": "qcomm_codec_cost", "what": "the fp16 quantized-comm codec: encode 4.68-4.86 ms + decode 2.18-2.44 ms "
                                           "of kernels per step under its `## encoder/decoder fp16 None ##` ranges "
                                           "(forward; its backward casts/clamps come on top), next to the all_to_all",
         "any": [{"where": "finding", "rules": ["comm_codec"],
                  "text": r"fp16 codec .* 4\.(6[89]|[78]\d) ms of encode and 2\.(1[89]|[234]\d) ms of decode"}]})
    REAL["torchrec/sst_long_a2a_optimizer_5_qcomm"]["claims"].insert(
        0, {"verdict": "right", "rules": ["comm_codec"], "text": r"7\.(0\d|1\d) ms over 4 ranks",
            "why": "run 2: encoder-range kernels 4.68-4.86 ms, decoder-range 2.18-2.44 ms per step (mean 7.12); "
                   "what it saves is not in this trace (opt_5, another folder, differs in its straggler's waits)"})
    for name, per_step in (("torchrec/sst_long_a2a_optimizer_3", "12.8, 11.9"),
                           ("torchrec/sst_long_a2a_optimizer_5", "14.6, 14.0")):
        exp = REAL[name]
        exp["problems"].append(
            {"id": "exposed_a2a_r2", "what": f"rank 2 (last to arrive: its all_to_all is transfer, not a wait) runs "
                                             f"{per_step} ms of SendRecv in steps 5, 6 that no compute overlaps, the "
                                             "next compute kernel, launched before the all_to_all began, starting "
                                             "≤ 0.1 ms after it ends: its device waits on the exchange",
             "any": [{"where": "finding", "rules": ["exposed_comm"], "text": r"all_?to_?all"}]})
        exp["claims"].insert(0, {"verdict": "right", "rules": ["exposed_comm"], "text": r"all_?to_?all",
                                 "gain_ms": [8.0, 25.0],
                                 "why": "12-15 ms per step of exposed all_to_all on rank 2 that queued compute "
                                        "waits on (12-23 ms on its peers, part of it the wait for rank 2)"})
    REAL["hta/a100_16rank_alltoall_rank0.json.gz"]["silent"].append(
        {"id": "no_pin_memory_for_704B", "why": "the host blocks 145.6-146.6 ms per step in `aten::to` -> a 704-B "
                                                "`Memcpy DtoH (Device -> Pageable)` (2 µs on the device) under "
                                                "`## sparse_data_dist ##`: its stream 27 was made to wait "
                                                "(cudaStreamWaitEvent 0.9 ms before) on the compute stream, whose "
                                                "queue (a CUDA graph launched 47.5 ms earlier) drains only then; the "
                                                "device's 64 ms gap sits before that graph's first recorded node, "
                                                "with work queued: pinning the 704 B changes nothing, and removing "
                                                "the sync frees the host, not the device (1.2 ms/step of idle waits "
                                                "for a launch)",
         "match": {"where": "finding", "text": r"pin_memory|pinned|pageable", "not_text": r"alone does not help"}})


_recall1()
