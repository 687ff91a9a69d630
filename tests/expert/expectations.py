"""What an expert expects of llmdiag on each real trace set: data, not code (matcher format: judge.py).

Per set:
  problems  present in the events (truth: /work/notes/truth.md, tests/expert/truth/); each must be found by
            some finding or issue matching one of `any` (recall)
  claims    how a finding is judged, first match wins: right / wrong (the claim is false in the events) /
            misleading (true number, wrong cause or advice) / unverified (the corpus cannot tell)
  silent    findings that must NOT fire (silent twins inside the set)
  headline  numbers of the analysis against the truth scripts (`truth` names a value computed by
            score.truth_values) or a fixed value
  xfail     ids (problem, silent or headline) that llmdiag at the corpus' writing (main @ c99b71c) fails,
            each with what is wrong: pinned strict in tests/expert/test_expert_corpus.py
Nothing here was fitted to llmdiag's output: the numbers come from the events.
"""

from __future__ import annotations

NO_CACHING = r"PYTORCH_NO_(CUDA|HIP)_MEMORY_CACHING"
STRAGGLER = r"straggl|arriv\w* last|late"
HOST_STALL = r"stall|no (profiled )?op|not profiled|unprofiled|nothing (is )?profiled|sleep"
FP32 = r"fp32|sgemm|float32|single.precision"
LATE_CAPTURE = r"captur|lacks?\b|missing (the )?(first|leading)|(first|leading) collective|started? (late|after)"
OUTLIER = r"outlier|slow(est)? step|longer than|warm.?up"
FP32_CLAIMS = [{"verdict": "wrong", "text": r"bfloat16|bf16|tf32", "not_text": r"fp16|float16|half",
                "why": "V100 has no bf16/TF32 tensor cores: fp16 autocast is the advice"},
               {"verdict": "right", "text": FP32, "why": "fp32 GEMMs on a V100"}]
WITH_STACK = {"verdict": "right", "text": r"with_stack|python_function", "rules": ["profiler_overhead"],
              "why": "python_function events: with_stack on, host times inflated"}
CPU_ONLY = {"verdict": "right", "rules": ["contaminated_timings"], "why": "CPU ops only: informational, true"}
MEMORY_UNUSED = {"verdict": "unverified", "rules": ["memory_unused"],
                 "why": "2.6 GiB of 32 GiB from [memory] events; whether a larger batch helps is not in the trace"}


def _torchrec(outlier: int, late: list[int], lead_ms: tuple[float, float], stall: bool, two_runs: bool = False,
              sleep: bool = False) -> dict:
    """The torchrec sets share their shape: rank 2 late capture and straggler, V100 fp32, allocator on."""
    problems = [{"id": f"late_capture_r{r}", "what": f"rank {r}'s capture starts late, lacking leading collectives",
                 "any": [{"where": "any", "text": LATE_CAPTURE, "rank": r, "not_text": "arriv"}]} for r in late]
    problems += [
        {"id": "straggler_r2", "what": f"rank 2 arrives last, holding the others {lead_ms[0]:g}-{lead_ms[1]:g} ms/step",
         "any": [{"where": "finding", "text": STRAGGLER + "|" + HOST_STALL, "rank": 2, "min_severity": "medium"}]},
        {"id": "fp32_gemm_v100", "what": "fp32 volta_sgemm GEMMs, ~50-60 % of compute, on V100 (fp16 AMP)",
         "any": [{"where": "finding", "text": FP32, "min_severity": "medium"}]},
    ]
    if stall:
        problems.append({"id": "host_stall_r2", "what": "rank 2 stalls on the host with no profiled op every step",
                         "any": [{"where": "finding", "text": HOST_STALL, "rank": 2}]})
    if outlier:
        problems += [
            {"id": f"outlier_step_{outlier}", "what": f"step #{outlier} is 2.3-2.9x the others (allocator burst)",
             "any": [{"where": "any", "text": OUTLIER, "step": outlier}]},
            {"id": f"allocator_flush_{outlier}", "what": f"cudaMalloc/cudaFree burst in step #{outlier} (allocator on)",
             "any": [{"where": "finding", "text": r"cudaFree|cudaMalloc|allocat", "not_text": NO_CACHING}]}]
    claims = [
        {"verdict": "wrong", "rules": ["stragglers"], "ranks_beyond": [2],
         "why": "the only straggler is rank 2 (completion-time pairing)"},
        {"verdict": "wrong", "rules": ["stragglers"], "rank": 2, "gain_ms": list(lead_ms), "gain_outside": True,
         "why": f"rank 2 holds the others {lead_ms[0]:g}-{lead_ms[1]:g} ms/step by completion-time pairing; "
                "the claimed waiting comes from pairing a late capture's collectives by position"},
        {"verdict": "misleading", "text": r"uneven work", "not_text": r"host", "rank": 2,
         "why": "rank 2 has no more GPU compute than its peers (362 vs 382-385 ms in _3); it stalls on the host "
                "with no profiled op"},
        {"verdict": "right", "text": STRAGGLER + "|" + HOST_STALL, "rank": 2, "why": "rank 2 is the straggler"},
        {"verdict": "wrong", "rules": ["stragglers"], "why": "the only straggler is rank 2"},
        {"verdict": "misleading", "text": NO_CACHING,
         "why": "the caching allocator is on (3 cudaMalloc, 0 cudaFree in steady steps); the idle is one flush"},
        {"verdict": "right", "text": r"cudaFree|cudaMalloc|allocat", "why": "allocator burst in one step"},
        *FP32_CLAIMS,
        {"verdict": "wrong", "rules": ["host_bound"],
         "why": "steady steps idle 5-8 ms (r0); the long idle is the allocator burst and rank 2's stall"},
        {"verdict": "unverified", "rules": ["unfused_elementwise"],
         "why": "elementwise kernels 10-11 % of compute (23-24 % with the qcomm codecs): fusing them is plausible, "
                "the gain is not established from the events"},
    ]
    if sleep:
        claims += [
            {"verdict": "misleading", "rules": ["exposed_comm", "dp_overlap", "tp_exposed"],
             "why": "the exposed all_to_all on ranks 0,1,3 is the ~1 s wait for rank 2's host stall"},
            {"verdict": "misleading", "rules": ["host_sync"],
             "why": "ranks 0,1,3's cudaStreamSynchronize wait for rank 2, the cause is rank 2's stall"}]
    else:
        claims += [
            {"verdict": "unverified", "rules": ["exposed_comm", "dp_overlap", "tp_exposed"],
             "why": "exposed comm 23-42 ms/step is real, but part is the wait for rank 2"},
            {"verdict": "unverified", "rules": ["host_sync"], "why": "10 stream syncs/step for KJT splits: inherent"}]
    silent = [
        {"id": "no_allocator_off_advice", "why": "the caching allocator is on",
         "match": {"where": "finding", "text": NO_CACHING}},
        {"id": "no_other_straggler", "why": "ranks 0, 1, 3 are never the straggler",
         "match": {"where": "finding", "rules": ["stragglers"], "ranks_beyond": [2]}},
        {"id": "no_launch_bound", "why": "not launch-bound: steady idle is 5-8 ms/step",
         "match": {"where": "finding", "rules": ["host_bound", "host_op_stall"], "text": r"torch\.compile|CUDA graph"}},
    ]
    headline = [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                 "why": "the job's step, not a mean over one outlier step"}]
    if two_runs:
        headline = [{"id": "not_refused", "field": "refused", "equals": False,
                     "why": "two complete runs in one folder: analyse them (or one, saying so), never refuse"}] + headline
    return {"problems": problems, "claims": claims, "silent": silent, "headline": headline}


REAL: dict[str, dict] = {
    "torchrec/sst_long_a2a_optimizer_3": dict(_torchrec(4, [1, 2], (10.0, 100.0), True), xfail={
        "late_capture_r1": "no issue names a late-starting capture",
        "late_capture_r2": "no issue names a late-starting capture",
        "fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0",
        "host_stall_r2": "the 20 ms host stall is told 'uneven work'",
        "outlier_step_4": "step #4 (379 ms) is averaged in, not named",
        "allocator_flush_4": "allocator_churn advises unsetting PYTORCH_NO_CUDA_MEMORY_CACHING",
        "no_allocator_off_advice": "allocator_churn advises unsetting PYTORCH_NO_CUDA_MEMORY_CACHING",
        "step_time": "step time 245 ms = mean over the 379 ms outlier (median 157)",
        "precision": "stragglers (wrong: 287 ms/step imposed), allocator_churn (misleading: allocator on)"}),
    "torchrec/sst_long_a2a_optimizer_5": dict(_torchrec(4, [2], (10.0, 100.0), True), xfail={
        "late_capture_r2": "no issue names a late-starting capture",
        "fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0",
        "host_stall_r2": "the 20 ms host stall is told 'uneven work'",
        "outlier_step_4": "step #4 (444 ms) is averaged in, not named",
        "allocator_flush_4": "allocator_churn advises unsetting PYTORCH_NO_CUDA_MEMORY_CACHING",
        "no_allocator_off_advice": "allocator_churn advises unsetting PYTORCH_NO_CUDA_MEMORY_CACHING",
        "step_time": "step time 267 ms = mean over the 444 ms outlier (median 163)",
        "precision": "stragglers (wrong: 562 ms/step imposed), allocator_churn (misleading: allocator on)"}),
    "torchrec/sst_long_a2a_optimizer_5_qcomm": dict(_torchrec(5, [2], (10.0, 100.0), True, two_runs=True), xfail={
        "late_capture_r2": "the folder is refused", "straggler_r2": "the folder is refused",
        "fp32_gemm_v100": "the folder is refused", "host_stall_r2": "the folder is refused",
        "outlier_step_5": "the folder is refused", "allocator_flush_5": "the folder is refused",
        "not_refused": "refused: 'rank 0 appears in 2 files'", "step_time": "the folder is refused"}),
    "torchrec/sst_sleep_pl_dense_after_backward_2": dict(_torchrec(0, [2], (500.0, 1100.0), True, sleep=True), xfail={
        "late_capture_r2": "no issue names a late-starting capture",
        "fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0",
        "host_stall_r2": "the 1 s host stall is told 'uneven work'",
        "precision": "stragglers (misleading: 'uneven work' for a host stall)"}),
    "hta/sampled_pair": {
        "problems": [{"id": "exposed_comm", "what": "exposed comm 134-172 ms/step",
                      "any": [{"where": "finding", "rules": ["exposed_comm", "dp_overlap"], "min_severity": "medium"}]}],
        "claims": [{"verdict": "right", "rules": ["exposed_comm", "dp_overlap"], "gain_ms": [40.0, 180.0],
                    "why": "exposed comm 134-172 ms/step (capped by compute-only time)"},
                   {"verdict": "unverified", "rules": ["host_bound"],
                    "why": "event-sampled trace: kernels are missing, so idle and its split cannot be trusted"}],
        "silent": [], "headline": [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                                    "why": "steps 551/552 608-631 ms"}]},
    "hta/trace_diff": {
        "problems": [{"id": "fp32_gemm_v100", "what": "test.json: fp32 GEMMs 91 % of GEMM, 36 % of compute, V100",
                      "any": [{"where": "finding", "text": FP32, "min_severity": "medium"}]},
                     {"id": "other_job_named", "what": "control and test are different jobs (A100 vs V100)",
                      "any": [{"where": "issue", "text": r"another job|different job"}]}],
        "claims": [{"verdict": "right", "rules": ["exposed_memcpy"], "gain_ms": [12.0, 20.0],
                    "why": "exposed memcpy 16.1 ms/step on test (DtoD 15.5, HtoD 11.1 ms/step)"},
                   *FP32_CLAIMS],
        "silent": [], "headline": [], "xfail": {"fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0"}},
    "hta/a100_16rank_alltoall_rank0.json.gz": {
        "problems": [{"id": "exposed_comm", "what": "exposed comm 32.3 ms/step of 215",
                      "any": [{"where": "finding", "rules": ["exposed_comm", "dp_overlap"], "min_severity": "medium"}]}],
        "claims": [{"verdict": "right", "rules": ["exposed_comm", "dp_overlap"], "gain_ms": [24.0, 40.0],
                    "why": "exposed comm 32.3 ms/step"},
                   {"verdict": "wrong", "rules": ["host_bound"],
                    "why": "only 2.1 ms/step of idle waits for a launch: the launch queue is hundreds deep; "
                           "the 138 ms/step idle is dependency waits"}],
        "silent": [{"id": "no_launch_bound", "why": "host is far ahead (queue up to 946)",
                    "match": {"where": "finding", "rules": ["host_bound"], "min_severity": "medium"}}],
        "headline": [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                      "why": "steps 210-216 ms"}],
        "xfail": {"no_launch_bound": "host_bound (medium) claims 18.8 ms/step of launch waits, truth 2.1",
                  "precision": "host_bound (wrong)"}},
    "hta/nccl_data.json.gz": {
        "problems": [{"id": "host_bound", "what": "159 ms/step of GPU idle waits for the host's next launch",
                      "any": [{"where": "finding", "rules": ["host_bound"], "min_severity": "medium"}]}],
        "claims": [{"verdict": "right", "rules": ["host_bound"], "gain_ms": [100.0, 180.0],
                    "why": "idle waiting for the host 158.9 ms/step; both host threads busy (main 755, autograd 709 ms)"},
                   {"verdict": "right", "rules": ["dp_overlap", "exposed_comm"], "gain_ms": [9.0, 17.0],
                    "why": "exposed comm 13.1 ms/step"},
                   {"verdict": "unverified", "rules": ["low_busbw"],
                    "why": "one rank of two: kernel time includes waiting for the peer, busbw cannot be told"}],
        "silent": [], "headline": [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                                    "why": "steps 220-225 ms"}]},
    "hta/ns_resolution_rank-0.pt.trace.json.gz": {
        "problems": [{"id": "fp32_gemm_v100", "what": "fp32 GEMMs 100 % of GEMM, 25 % of compute, V100",
                      "any": [{"where": "finding", "text": FP32, "min_severity": "medium"}]}],
        "claims": [*FP32_CLAIMS],
        "silent": [{"id": "no_comm_finding", "why": "world size 1, no communication",
                    "match": {"where": "finding", "rules": ["exposed_comm", "dp_overlap", "stragglers", "low_busbw"]}}],
        "headline": [], "xfail": {"fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0"}},
    "hta/amd_mi250_minitoy.json.gz": {
        "problems": [],
        "claims": [{"verdict": "misleading", "rules": ["host_bound"],
                    "why": "a 14-kernel toy: the idle is one 6.5 ms first hipLaunchKernel (code-object load), "
                           "not per-op launch overhead torch.compile removes"}],
        "silent": [], "headline": [], "xfail": {"precision": "host_bound (misleading)"}},
    "hta/cpu_only_rank-34.pt.trace.json.gz": {"problems": [], "claims": [CPU_ONLY], "silent": [], "headline": []},
    "hta/rank_not_found.json.gz": {"problems": [], "claims": [CPU_ONLY], "silent": [], "headline": []},
    "tracelens/b200_vllm_tp8_rank0.json.gz": {
        "problems": [{"id": "with_stack_caveat", "what": "15230 python_function events: with_stack on, host inflated",
                      "any": [{"where": "any", "text": r"with_stack|python_function|stack"}]}],
        "claims": [WITH_STACK,
                   {"verdict": "unverified", "rules": ["host_op_stall"],
                    "why": "GPU idle 2.43 ms under one 2.45 ms aten::addmm (a 30 us launch inside): true, but its "
                           "cause (first-call cuBLASLt setup or the profiler) is not in the events"},
                   {"verdict": "misleading", "rules": ["host_bound"], "not_text": r"with_stack|stack",
                    "why": "host times inflated by with_stack (15230 python_function events), no caveat"},
                   {"verdict": "right", "rules": ["host_bound"], "why": "eager decode is launch-bound"}],
        "silent": [], "headline": [],
        "xfail": {"with_stack_caveat": "no caveat for with_stack traces",
                  "precision": "host_bound (misleading: no with_stack caveat)"}},
    "tracelens/mi300_ddp8_actckpt_rank0.json.gz": {
        "problems": [{"id": "exposed_comm", "what": "exposed comm 10.7 ms/step of 16",
                      "any": [{"where": "finding", "rules": ["exposed_comm", "dp_overlap"], "min_severity": "medium"}]},
                     {"id": "with_stack_caveat", "what": "34405 python_function events: with_stack on",
                      "any": [{"where": "any", "text": r"with_stack|python_function|stack"}]}],
        "claims": [WITH_STACK, {"verdict": "right", "rules": ["exposed_comm", "dp_overlap"],
                    "why": "exposed comm 10.7 ms/step (gain capped by compute-only time)"},
                   {"verdict": "unverified", "rules": ["low_busbw"],
                    "why": "one rank of eight: kernel time includes waiting for peers"}],
        "silent": [], "headline": [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                                    "why": "steps 15.9-16.8 ms"}],
        "xfail": {"with_stack_caveat": "no caveat for with_stack traces"}},
    "tracelens/mi300_resnet18_no_caching_allocator.json.gz": {
        "problems": [{"id": "allocator_off", "what": "hipFree 1360 calls 3346 ms, hipMalloc 1460: caching off",
                      "any": [{"where": "finding", "text": r"hipFree|hipMalloc|allocat", "min_severity": "medium"}]}],
        "claims": [WITH_STACK, {"verdict": "right", "text": r"hipFree|hipMalloc|allocat", "why": "allocator off"}],
        "silent": [{"id": "no_8B_peak", "why": "memory events are all CPU (Device Type 0): no device peak",
                    "match": {"where": "finding", "text": r"\b8 B\b"}}],
        "headline": [{"id": "no_device_peak_from_cpu_events", "field": "memory_peak_max", "not_in": [8],
                      "why": "the only [memory] events are CPU-side (peak 8 B)"}],
        "xfail": {"no_device_peak_from_cpu_events": "memory_peak_max is 8 B from CPU [memory] events"}},
    "kineto/samples/resnet50_num_workers_0": {
        "problems": [{"id": "dataloader", "what": "DataLoader __next__ 45-69 ms/step, 30-40 % of the step",
                      "any": [{"where": "finding", "rules": ["dataloader"], "min_severity": "medium"}]},
                     {"id": "fp32_gemm_v100", "what": "fp32 GEMMs 100 % of GEMM on V100",
                      "any": [{"where": "finding", "text": FP32, "min_severity": "medium"}]},
                     {"id": "two_captures", "what": "two captures of one process (worker0.<ts>), not two ranks",
                      "any": [{"where": "issue", "text": r"captures?|same (process|worker)|two runs|2 runs"}]}],
        "claims": [{"verdict": "right", "rules": ["dataloader"], "why": "DataLoader-bound"},
                   {"verdict": "misleading", "rules": ["host_bound"],
                    "why": "the idle waiting for the host is the DataLoader (72 of 77 ms/step), told launch-bound"},
                   *FP32_CLAIMS,
                   MEMORY_UNUSED],
        "silent": [], "headline": [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                                    "why": "ProfilerStep#N are present (2021 schema, cat Operator)"}],
        "xfail": {"fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0",
                  "two_captures": "the two captures are numbered ranks 0 and 1",
                  "step_time": "ProfilerSteps of the 2021 schema not found: one 936 ms window",
                  "precision": "host_bound (misleading: the idle is the DataLoader)"}},
    "kineto/samples/resnet50_num_workers_4": {
        "problems": [{"id": "fp32_gemm_v100", "what": "fp32 GEMMs 100 % of GEMM on V100",
                      "any": [{"where": "finding", "text": FP32, "min_severity": "medium"}]},
                     {"id": "two_captures", "what": "two captures of one process (worker0.<ts>), not two ranks",
                      "any": [{"where": "issue", "text": r"captures?|same (process|worker)|two runs|2 runs"}]}],
        "claims": [{"verdict": "unverified", "rules": ["host_bound"],
                    "why": "15-26 ms/step of idle waits for the host; its cause is not established"},
                   *FP32_CLAIMS,
                   MEMORY_UNUSED],
        "silent": [{"id": "no_dataloader", "why": "4 workers: DataLoader 1.4 ms/step",
                    "match": {"where": "finding", "rules": ["dataloader"]}}],
        "headline": [{"id": "step_time", "field": "step_ms", "truth": "median_step_ms", "tol": 0.2,
                      "why": "ProfilerStep#N are present (2021 schema, cat Operator)"}],
        "xfail": {"fp32_gemm_v100": "fp32_gemm fires only on compute >= 8.0",
                  "two_captures": "the two captures are numbered ranks 0 and 1",
                  "step_time": "ProfilerSteps of the 2021 schema not found: one 765 ms window"}},
}
