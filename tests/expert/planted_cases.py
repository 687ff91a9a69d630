"""The planted corpus' scenarios: each a Knobs (tests/expert/planted.py) and its expectations, in the format of
tests/expert/expectations.py (matchers: judge.py). Each problem has a silent twin: a job that looks the same
without it, where the finding must not fire.
"""

from __future__ import annotations

from tests.expert.expectations import step_headlines
from tests.expert.planted import A100, MI300X, V100, Knobs
from tests.expert.planted_causal import causal_scenarios
from tests.expert.planted_recall_a import recall_a_scenarios
from tests.expert.planted_recall_b import recall_b_scenarios
from tests.expert.planted_recall_c import recall_c_scenarios
from tests.expert.planted_recall_e import recall_e_scenarios
from tests.expert.planted_recall_d import recall_d_scenarios
from tests.expert.planted_recall_f import recall_f_scenarios
from tests.expert.planted_recall_g import recall_g_scenarios
from tests.expert.planted_recall_h import recall_h_scenarios
from tests.expert.planted_recall_i import recall_i_scenarios

NO_CACHING = r"PYTORCH_NO_(CUDA|HIP)_MEMORY_CACHING"

STRAGGLER_TEXT = r"straggl|arriv\w* last|\blate"  # a word: "simulated" (a gain's kind) is no straggler claim


def scenarios() -> dict[str, tuple[Knobs, dict]]:
    out = {}
    for late_rank, by in ((1, 1), (3, 3), (2, 5)):
        out[f"late_capture_r{late_rank}_by{by}"] = (Knobs(late_rank=late_rank, late_by=by), {
            "problems": [{"id": "late_capture", "what": f"rank {late_rank}'s capture starts {by} collective(s) late",
                          "any": [{"where": "any", "text": r"captur|lacks?\b|missing (the )?(first|leading)|(first|leading) collective",
                                   "not_text": r"arriv", "rank": late_rank}]}],
            "silent": [{"id": "no_fake_straggler", "why": "every rank arrives together: no straggler, no skew",
                        "match": {"where": "finding", "text": STRAGGLER_TEXT}}],
            "claims": [{"verdict": "wrong", "rules": ["stragglers"],
                        "why": "no rank is late: skew from pairing a late capture by position"}]})
    out["late_capture_twin"] = (Knobs(), {
        "problems": [],
        "silent": [{"id": "no_late_capture", "why": "all captures start together",
                    "match": {"where": "any", "text": r"captur\w* start|lacks?\b|(first|leading) collective", "not_text": r"arriv"}},
                   {"id": "no_fake_straggler", "why": "no straggler", "match": {"where": "finding", "text": STRAGGLER_TEXT}}],
        "claims": []})
    out["host_stall_r2"] = (Knobs(stall_rank=2, stall_ms=30.0), {
        "problems": [{"id": "host_stall", "what": "rank 2 stalls 30 ms per step on the host, nothing profiled",
                      "any": [{"where": "finding", "text": STRAGGLER_TEXT + r"|stall", "rank": 2, "min_severity": "medium"}]}],
        "silent": [],
        "claims": [{"verdict": "misleading", "text": r"uneven work", "not_text": r"host", "rank": 2,
                    "why": "rank 2's GPU work is the same as its peers': the time is a host stall with no op"},
                   {"verdict": "wrong", "rules": ["stragglers"], "rank": 2, "gain_ms": [10.0, 70.0], "gain_outside": True,
                    "why": "rank 2 imposes ~30 ms per step"},
                   {"verdict": "right", "text": STRAGGLER_TEXT + r"|stall", "rank": 2, "why": "rank 2 holds the others ~30 ms/step"},
                   {"verdict": "unverified", "rules": ["exposed_comm", "dp_overlap"],
                    "why": "the others' all_to_all time is waiting for rank 2 (counted once, under the straggler)"}]})
    out["host_stall_twin"] = (Knobs(), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_straggler", "why": "no rank stalls", "match": {"where": "finding", "text": STRAGGLER_TEXT}}]})
    out["blocking_copy"] = (Knobs(blocking_copy_ms=40.0), {
        "problems": [{"id": "blocking_copy", "what": "a 40 ms blocking cudaMemcpy per step idles the GPU",
                      "any": [{"where": "finding", "text": r"cudaMemcpy\b|blocking cop|pageable|pin_memory|pinned",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "not_launch_bound", "why": "the idle is a blocking copy, not kernel launches",
                    "match": {"where": "finding", "text": r"torch\.compile|CUDA graph"}}],
        "claims": [{"verdict": "misleading", "rules": ["host_bound"],
                    "why": "the GPU waits for a blocking copy, not for launches"},
                   {"verdict": "right", "text": r"cudaMemcpy\b|blocking cop|pageable|pin", "why": "the blocking copy"}]})
    out["blocking_copy_twin"] = (Knobs(async_copy=True), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_copy_finding", "why": "a 0.3 ms pinned async copy under a busy GPU",
                    "match": {"where": "finding", "text": r"cudaMemcpy|blocking|memcpy"}}]})
    out["outlier_step"] = (Knobs(outlier_step=2), {
        "problems": [{"id": "outlier_step", "what": "step #12 runs 3x the others",
                      "any": [{"where": "any", "text": r"outlier|slow(est)? step|#12|step 12", "step": 12}]}],
        "headline": step_headlines("one 3x step must not move the median step reported for the job"),
        "silent": [], "claims": [],})
    out["outlier_step_twin"] = (Knobs(), {
        "problems": [], "claims": [],
        "headline": step_headlines("uniform steps"),
        "silent": [{"id": "no_outlier", "why": "uniform steps", "match": {"where": "any", "text": r"outlier"}}]})
    out["allocator_off"] = (Knobs(alloc_off=True), {
        "problems": [{"id": "allocator_off", "what": "cudaMalloc/cudaFree around every kernel (caching off)",
                      "any": [{"where": "finding", "text": r"cudaFree|cudaMalloc|allocat", "min_severity": "medium"}]}],
        "silent": [],
        "claims": [{"verdict": "right", "text": r"cudaFree|cudaMalloc|allocat", "why": "allocator off, GPU idle in cudaFree"},
                   {"verdict": "misleading", "text": r"torch\.compile|CUDA graph",
                    "why": "the idle is cudaFree's device sync, not launches"}]})
    out["allocator_on_twin"] = (Knobs(alloc_on=True), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_allocator_off_advice", "why": "3 cached cudaMalloc per step: the allocator is on",
                    "match": {"where": "finding", "text": r"PYTORCH_NO_(CUDA|HIP)_MEMORY_CACHING|allocator"}}]})
    out["fp32_v100"] = (Knobs(device=dict(V100), gemm="fp32"), {
        "problems": [{"id": "fp32_gemm_v100", "what": "fp32 volta_sgemm GEMMs are most of the compute on V100",
                      "any": [{"where": "finding", "text": r"fp32|sgemm|float32|single.precision", "min_severity": "medium"}]}],
        "silent": [],
        "claims": [{"verdict": "wrong", "text": r"bfloat16|bf16|tf32", "not_text": r"fp16|float16|half",
                    "why": "V100 has no bf16 or TF32 tensor cores: fp16 autocast is the advice"},
                   {"verdict": "right", "text": r"fp32|sgemm|float32", "why": "fp32 GEMMs on a V100"}],})
    out["fp16_v100_twin"] = (Knobs(device=dict(V100), gemm="fp16"), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_fp32_finding", "why": "fp16 h884 tensor-core GEMMs",
                    "match": {"where": "finding", "text": r"fp32|sgemm|float32"}}]})
    out["bf16_a100_twin"] = (Knobs(), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_fp32_finding", "why": "bf16 GEMMs on A100",
                    "match": {"where": "finding", "text": r"fp32|sgemm|float32"}}]})
    out.update(more_scenarios())
    out.update(third_scenarios())
    out.update(causal_scenarios())
    out.update(recall_a_scenarios())
    out.update(recall_b_scenarios())
    out.update(recall_c_scenarios())
    out.update(recall_e_scenarios())
    out.update(recall_d_scenarios())
    out.update(recall_f_scenarios())
    out.update(recall_g_scenarios())
    out.update(recall_h_scenarios())
    out.update(recall_i_scenarios())
    __import__('tests.expert.planted_recall_j', fromlist=['x']).register(out)  # data movement (branch datamove)
    __import__('tests.expert.planted_recall_codec', fromlist=['x']).register(out)  # codec net verdict (branch codec)
    __import__('tests.expert.planted_recall_postfix', fromlist=['x']).register(out)  # gains after a fix (postfix)
    __import__('tests.expert.planted_recall_capture', fromlist=['x']).register(out)  # held reads, sampled comm
    __import__('tests.expert.planted_recall_ncclsync', fromlist=['x']).register(out)  # optimizer, busbw (ncclsync)
    __import__('tests.expert.planted_recall_outlier', fromlist=['x']).register(out)  # outlier steps (branch outlier)
    __import__('tests.expert.planted_recall_firstcall', fromlist=['x']).register(out)  # first-use loads (firstcall)
    __import__('tests.expert.planted_recall_actckpt', fromlist=['x']).register(out)  # recompute (branch actckpt)
    __import__('tests.expert.planted_recall_a2a', fromlist=['x']).register(out)  # straggler + own a2a (a2a)
    __import__('tests.expert.planted_recall_coldstep', fromlist=['x']).register(out)  # cold steps only (coldstep)
    __import__('tests.expert.planted_recall_fusion', fromlist=['x']).register(out)  # norm chains (branch fusion)
    __import__('tests.expert.planted_recall_forward', fromlist=['x']).register(out)  # forward-only capture
    __import__('tests.expert.planted_recall_itemsync', fromlist=['x']).register(out)  # item() refill (itemsync)
    return out


# True of every planted job by construction: no communication overlaps compute (the compute stream waits
# for each collective), ~12 % of the step; the step's end syncs once (loss.item()).
PLANTED_COMMON = [
    {"verdict": "right", "rules": ["exposed_comm", "dp_overlap"], "why": "every collective is exposed by construction"},
]


def more_scenarios() -> dict[str, tuple[Knobs, dict]]:
    """Long host op vs launch-bound, DeepEP kernels as communication, two runs in one folder."""
    out = {}
    out["long_host_op"] = (Knobs(long_host_op_ms=21.0), {
        "problems": [{"id": "long_host_op", "what": "one 21 ms aten::split_with_sizes per step drains the GPU",
                      "any": [{"where": "finding", "text": r"split_with_sizes", "min_severity": "medium"}]}],
        "silent": [{"id": "no_compile_advice", "why": "one long host op: torch.compile/CUDA graphs do not remove it",
                    "match": {"where": "finding", "text": r"torch\.compile|CUDA graph", "not_text": r"split_with_sizes"}}],
        "claims": [{"verdict": "misleading", "rules": ["host_bound"], "not_text": r"split_with_sizes",
                    "why": "the idle is one 21 ms host op, not launch overhead: name the op"},
                   {"verdict": "right", "text": r"split_with_sizes", "why": "the op behind the idle"}],})
    out["launch_bound_twin"] = (Knobs(tiny_kernels=800), {
        "problems": [{"id": "launch_bound", "what": "800 4-us kernels behind 30-us host ops: ~21 ms/step idle",
                      "any": [{"where": "finding", "rules": ["host_bound"], "min_severity": "medium"}]}],
        "silent": [], "claims": [{"verdict": "right", "rules": ["host_bound"], "why": "launch-bound by construction"}]})
    out["deepep_comm"] = (Knobs(deepep=True), {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "deepep_is_comm", "field": "comm_ms", "truth": "comm_ms_per_step", "tol": 0.1,
                      "why": "dpsk::ep::internode dispatch/combine are communication, not compute"}]})
    out["cub_lookalike_twin"] = (Knobs(cub_in_ep_namespace=True), {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "cub_is_compute", "field": "comm_ms", "truth": "comm_ms_per_step", "tol": 0.1,
                      "why": "cdpsk::ep::CUB_* is a scan (compute), not DeepEP"}]})
    out["two_runs"] = (Knobs(runs=2), {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "not_refused", "field": "refused", "equals": False,
                      "why": "two complete runs of one job in a folder: analyse them, never refuse"},
                     *step_headlines("either run's step")],})
    return out


def third_scenarios() -> dict[str, tuple[Knobs, dict]]:
    """One long blocking copy on ROCm, an allocator flush with the allocator on, with_stack, CPU-only memory."""
    out = {}
    out["blocking_copy_hip_once"] = (Knobs(device=dict(MI300X), rt="hip", copy_once_ms=493.0), {
        "problems": [{"id": "blocking_copy", "what": "one 493 ms hipMemcpyWithStream in step #12 idles the GPU",
                      "any": [{"where": "finding", "text": r"hipMemcpyWithStream|blocking cop|pageable|pin_memory|pinned"}]}],
        "silent": [{"id": "not_launch_bound", "why": "one blocking copy, not kernel launches",
                    "match": {"where": "finding", "text": r"torch\.compile|CUDA graph"}}],
        "claims": [{"verdict": "misleading", "rules": ["host_bound"], "why": "the GPU waits for one blocking copy"},
                   {"verdict": "right", "text": r"hipMemcpyWithStream|blocking cop|pageable|pin", "why": "the copy"}]})
    out["allocator_on_flush"] = (Knobs(flush_step=2), {
        "problems": [{"id": "allocator_flush", "what": "step #12 frees and refills the cache (25 cudaFree, 9 cudaMalloc)",
                      "any": [{"where": "finding", "text": r"cudaFree|cudaMalloc|allocat|flush|empty_cache",
                               "not_text": NO_CACHING}]}],
        "silent": [{"id": "no_allocator_off_advice", "why": "3 cached cudaMalloc in the other steps: the allocator is on",
                    "match": {"where": "finding", "text": NO_CACHING}}],
        "claims": [{"verdict": "misleading", "text": NO_CACHING, "why": "the allocator is on: one flush"},
                   {"verdict": "right", "text": r"cudaFree|cudaMalloc|allocat|flush", "why": "the flush in step #12"}],})
    out["with_stack"] = (Knobs(tiny_kernels=800, with_stack=True), {
        "problems": [{"id": "with_stack_caveat", "what": "python_function events: host times inflated by with_stack",
                      "any": [{"where": "any", "text": r"with_stack|python_function|stack"}]}],
        "silent": [], "claims": [{"verdict": "right", "rules": ["profiler_overhead"], "why": "with_stack by construction"},
                                 {"verdict": "misleading", "rules": ["host_bound"], "not_text": r"with_stack|stack",
                                  "why": "host-bound idle measured under with_stack, no caveat"},
                                 {"verdict": "right", "rules": ["host_bound"], "why": "launch-bound, with the caveat"}],})
    out["cpu_memory_only"] = (Knobs(cpu_memory_events=True), {
        "problems": [], "silent": [{"id": "no_8B", "why": "CPU [memory] events only",
                                    "match": {"where": "finding", "text": r"\b8 B\b"}}], "claims": [],
        "headline": [{"id": "no_device_peak_from_cpu_events", "field": "memory_peak_max", "equals": None,
                      "why": "no GPU [memory] event: there is no device peak"}],})
    return out
