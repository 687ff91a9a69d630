"""Planted scenarios for issue #34's classes, where a rule read one symptom instead of the chain of dependencies
that made the time: each with its silent twin (the same symptom, another cause). Knobs: tests/expert/planted.py;
the exact answers are the generator's `facts` (planted.simulate), computed from the placed events alone."""

from __future__ import annotations

import statistics

from tests.expert.planted import V100, Knobs, simulate

PIN = r"pin_memory|non_blocking"


def causal_scenarios() -> dict[str, tuple[Knobs, dict]]:
    out = {}
    # 1. A tiny `.item()` copy queued on stream 7 behind a kernel waiting on an event recorded on stream 30: the
    # device waits 39.94 ms per step inside the copy call (facts["event_wait"]), on the event, not on the copy.
    out["event_wait_copy"] = (Knobs(event_wait_ms=40.0), {
        "problems": [{"id": "event_wait", "what": "the copy's device op queued behind cudaStreamWaitEvent",
                      "any": [{"where": "finding", "text": r"stream 7\b.*cudaStreamWaitEvent.*stream 30\b",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "no_pin_memory", "why": "the device waits on an event: pinning or non_blocking gives nothing",
                    "match": {"where": "finding", "text": PIN, "not_text": r"would not remove"}}],
        "claims": [{"verdict": "misleading", "text": PIN, "not_text": r"would not remove",
                    "why": "the copy is 4 us; the 40 ms is the event wait it sits behind"},
                   {"verdict": "wrong", "rules": ["event_wait"], "gain_ms": [39.9, 40.0], "gain_outside": True,
                    "why": "39.94 ms per step of idle inside the copy call (facts)"},
                   {"verdict": "right", "rules": ["event_wait"], "why": "waiting stream 7, recording stream 30"}]})
    out["event_wait_twin"] = (Knobs(blocking_copy_ms=40.0, stream_wait=True), {
        "problems": [{"id": "blocking_copy", "what": "a 40 ms pageable cudaMemcpy per step",
                      "any": [{"where": "finding", "rules": ["host_sync"], "text": PIN, "min_severity": "medium"}]}],
        "silent": [{"id": "no_event_wait", "why": "the same wait/record calls, the event already done",
                    "match": {"where": "finding", "text": r"stream-event wait|StreamWaitEvent"}}],
        "claims": [{"verdict": "right", "rules": ["host_sync"], "why": "the pageable blocking copy"}]})
    # 2. Launch-bound against host-op-bound at the same short-kernel share (800 4-us kernels, 30 us of host per
    # op): launch calls of 8 us take 6.4 ms per step (launch-bound, launch_bound_twin), of 0.5 us 0.4 ms (the idle
    # is the ops' own host work: no fusion-of-short-kernels or CUDA graph advice).
    out["host_op_bound_twin"] = (Knobs(tiny_kernels=800, launch_us=0.5), {
        "problems": [{"id": "host_ops", "what": "the host's op work between launches bounds the GPU",
                      "any": [{"where": "finding", "rules": ["host_bound"], "text": r"host ops",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "no_launch_advice", "why": "launch calls are 0.4 ms of ~17 ms idle",
                    "match": {"where": "finding", "text": r"CUDA graph|fuse the short kernels"}}],
        "claims": [{"verdict": "misleading", "rules": ["host_bound"], "text": r"launches are the cost|CUDA graph",
                    "why": "launch calls are 0.4 ms per step"},
                   {"verdict": "right", "rules": ["host_bound"], "why": "host-op bound by construction"}]})
    # 3. One-time setup: in step #10 the first aten::mm of each of 6 shapes (Input Dims recorded) holds the host
    # 2.5 ms with the GPU drained; the same shapes' later calls take 25 us. Twin: the same 2.5 ms calls in every
    # step (the same shapes, not first calls): a per-step cost.
    out["first_call_setup"] = (Knobs(first_call_shapes=6, steps=2), {
        "problems": [{"id": "one_time", "what": "first calls of 6 GEMM shapes in step #10",
                      "any": [{"where": "finding", "text": r"one-time|first call", "step": 10}]}],
        "silent": [{"id": "no_per_step_gain", "why": "paid once: no per-step gain",
                    "match": {"where": "finding", "rules": ["host_op_stall"], "min_severity": "medium"}}],
        "claims": [{"verdict": "misleading", "rules": ["host_op_stall"], "not_text": r"one-time",
                    "why": "a one-time setup extrapolated per step"},
                   {"verdict": "right", "text": r"one-time|first call", "why": "first call of each shape"}]})
    out["first_call_twin"] = (Knobs(first_call_shapes=6, steps=2, slow_every_step=True), {
        "problems": [{"id": "recurring_stall", "what": "2.5 ms aten::mm host time in every step",
                      "any": [{"where": "finding", "rules": ["host_op_stall"], "text": r"aten::mm",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "not_one_time", "why": "the same shapes are slow in every step",
                    "match": {"where": "finding", "text": r"one-time"}}],
        "claims": [{"verdict": "right", "rules": ["host_op_stall"], "why": "recurring host time in aten::mm"}]})
    # 4. An allocator flush after three normal steps (step #13: 25 cudaFree + 9 cudaMalloc, 111 ms of idle in
    # them, facts by construction: 25 × 3 + 9 × 4 ms) against the same cost as warm-up growth in the first step.
    alloc = r"cudaFree|cudaMalloc|allocat|flush"
    out["allocator_flush_mid"] = (Knobs(flush_step=3), {
        "problems": [{"id": "mid_flush", "what": "step #13 frees and refills the cache after 3 normal steps",
                      "any": [{"where": "finding", "rules": ["allocator_churn"], "text": r"mid-capture",
                               "step": 13, "min_severity": "medium"}]}],
        "silent": [{"id": "not_warmup", "why": "three normal steps came first: not warm-up",
                    "match": {"where": "finding", "text": r"warm-up growth|not paid again"}}],
        "claims": [{"verdict": "misleading", "text": r"warm-up|not paid again", "not_text": r"not warm-up",
                    "why": "the flush follows normal steps"},
                   {"verdict": "wrong", "rules": ["allocator_churn"], "gain_ms": [22.1, 22.3], "gain_outside": True,
                    "why": "111 ms once in 5 steps: 22.2 ms per step"},
                   {"verdict": "right", "text": alloc, "why": "the mid-capture flush"}]})
    # The same flush in the capture's first step (step #10: 25 cudaFree + 9 cudaMalloc, 111 ms): frees are the
    # allocator retrying a failed allocation (memory pressure), not warm-up growth, but how often it recurs is
    # outside the capture. It is told as paid once in this capture, with what it would cost were it once per
    # captured window (111 / 5 = 22.2 ms per step), and the per-step gain is the steady steps' (0 by construction):
    # never called warm-up (the first fresh review of the TorchRec captures), never averaged into every step as a
    # high finding (the second: 213-269 ms step-4 flushes read as 30-37 % of the step, above the straggler).
    out["allocator_flush_first"] = (Knobs(flush_step=0), {
        "problems": [{"id": "first_flush", "what": "step #10 frees and refills the cache",
                      "any": [{"where": "finding", "rules": ["allocator_churn"],
                               "text": r"memory pressure.*paid once in this capture.*22\.20 ms per step more",
                               "step": 10, "gain_ms": [0.0, 0.01]}]}],
        "silent": [{"id": "not_growth", "why": "a step that frees the cache is not warm-up growth",
                    "match": {"where": "finding", "text": r"warm-up growth|not paid again"}},
                   {"id": "not_loud", "why": "one flush in the first captured step: how often it recurs is unknown",
                    "match": {"where": "finding", "rules": ["allocator_churn"], "min_severity": "medium"}}],
        "claims": [{"verdict": "misleading", "rules": ["allocator_churn"], "gain_ms": [0.0, 0.01],
                    "gain_outside": True, "why": "the steady steps hold no allocator idle"},
                   {"verdict": "right", "text": alloc, "why": "the flush, paid once, its recurrence unknown"}]})
    out["allocator_warmup_twin"] = (Knobs(warmup_growth=True), {
        "problems": [], "claims": [{"verdict": "right", "rules": ["allocator_churn"], "text": r"warm-up",
                                    "why": "growth in the first step only"}],
        "silent": [{"id": "no_flush_claim", "why": "first-step growth, no free: warm-up",
                    "match": {"where": "finding", "rules": ["allocator_churn"], "min_severity": "medium"}}]})
    # 6. Synchronous copies on a non-CUDA device (MTIA): 80 `aten::to` -> `aten::_copy_from` per step, each holding
    # the host 494 us of which its 10 DMA requests run 50 us: 80 x 444 us = 35.52 ms of idle inside the copies per
    # step (by construction). Twin: 80 host ops of the same length with no copy: host ops.
    mtia = dict(rt="mtia", device={"name": "MTIA v2", "totalGlobalMem": 68719476736})
    out["mtia_sync_copies"] = (Knobs(sync_copies=80, **mtia), {
        "problems": [{"id": "sync_copies", "what": "80 synchronous copies per step idle the device",
                      "any": [{"where": "finding", "rules": ["host_sync"], "text": r"_copy_from",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "not_host_ops", "why": "the idle is copies, not Python host work",
                    "match": {"where": "finding", "rules": ["host_bound"]}}],
        "claims": [{"verdict": "misleading", "rules": ["host_bound"], "why": "copies counted as host ops"},
                   {"verdict": "right", "rules": ["host_sync"], "text": r"simulated", "gain_ms": [20.0, 20.1],
                    "why": "simulated: the host waits 20.05 ms per step for the device to drain before its first "
                           "copy (the gap between its last op and the first aten::to, read from the events); "
                           "without that wait the copies run while the queued compute drains"},
                   {"verdict": "wrong", "rules": ["host_sync"], "gain_ms": [35.4, 35.6], "gain_outside": True,
                    "why": "35.52 ms per step inside the copies"},
                   {"verdict": "right", "rules": ["host_sync"], "text": r"_copy_from", "why": "the copies"}]})
    out["mtia_host_ops_twin"] = (Knobs(host_ops_twin=80, **mtia), {
        "problems": [{"id": "host_ops", "what": "80 500-us host ops per step",
                      "any": [{"where": "finding", "rules": ["host_bound"], "min_severity": "medium"}]}],
        "silent": [{"id": "no_copy_finding", "why": "no copy in the step",
                    "match": {"where": "finding", "text": r"_copy_from|synchronous .*cop"}}],
        "claims": [{"verdict": "right", "rules": ["host_bound"], "why": "host ops by construction"}]})
    # Item 4: iterations without ProfilerStep, found between consecutive `Optimizer.step#SGD.step` ops: 5 optimizer
    # steps give 4 iterations of the planted step length (the generator's facts). A forward-only capture without
    # ProfilerStep has no optimizer step, but its 5 planted steps run one op sequence 5 times on the main thread:
    # 5 iterations of the planted length from the repeats (metrics/rank/iterations.py). It was a silent twin, one
    # window, while only optimizer steps marked iterations; its repeats are the generator's steps, so the split is
    # right (the repeat detector's own silent twins, no repetition, are in tests/unit/metrics/test_iterations.py).
    it = Knobs(autograd=True, no_profiler_step=True)
    period = statistics.fmean(v for per in simulate(it)[1]["steps"].values() for v in per.values())
    out["iterations_no_profiler_step"] = (it, {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "per_iteration", "field": "median_step_ms", "value": period, "tol": 0.01,
                      "why": "the median step is one iteration, not the whole capture"},
                     {"id": "iterations", "field": "step_numbers", "equals": [0, 1, 2, 3],
                      "why": "4 iterations between 5 optimizer steps"}]})
    fo = Knobs(autograd=True, forward_only=True, no_profiler_step=True)
    fo_period = statistics.fmean(v for per in simulate(fo)[1]["steps"].values() for v in per.values())
    out["iterations_forward_only"] = (fo, {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "per_iteration", "field": "median_step_ms", "value": fo_period, "tol": 0.01,
                      "why": "the median step is one forward-only iteration, not the whole capture"},
                     {"id": "iterations", "field": "step_numbers", "equals": [0, 1, 2, 3, 4],
                      "why": "5 repeats of the forward's op sequence: the generator's 5 steps"}]})
    # 8. A straggler whose device idle shows nothing: rank 2's autograd thread (tid 202) sits 80 ms per step inside
    # its backward all_to_all op with no child event (by construction), while a side-stream kernel every rank runs
    # keeps its device busy. Twin: rank 2 stalls 30 ms with no op at all before the all_to_all, the device drained
    # (host_stall_r2's job): a process stall, not a thread inside a collective's op.
    out["thread_stall_r2"] = (Knobs(thread_stall_rank=2, thread_stall_ms=80.0), {
        "problems": [{"id": "thread_stall", "what": "rank 2's autograd thread stalls inside its all_to_all op",
                      "any": [{"where": "finding", "rules": ["stragglers"], "rank": 2,
                               "text": r"thread `tid 202` stalls.*nccl:all_to_all`, 80\.00 ms",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "cause_shown", "why": "the cause is in the trace: the thread's 80 ms with no event",
                    "match": {"where": "finding", "text": r"does not show why"}}],
        "claims": [{"verdict": "misleading", "rules": ["stragglers"], "text": r"does not show why",
                    "why": "the autograd thread's stall is in the events"},
                   {"verdict": "right", "rules": ["stragglers"], "rank": 2, "why": "rank 2 is late by its thread"}]})
    out["thread_stall_twin"] = (Knobs(stall_rank=2, stall_ms=30.0), {
        "problems": [{"id": "process_stall", "what": "rank 2 stalls 30 ms with no op, device drained",
                      "any": [{"where": "finding", "rules": ["stragglers"], "rank": 2, "text": r"no profiled host op"}]}],
        "silent": [{"id": "no_thread_claim", "why": "no collective op holds the stall",
                    "match": {"where": "finding", "text": r"host thread .* stalls"}}],
        "claims": [{"verdict": "right", "rules": ["stragglers"], "rank": 2, "why": "rank 2 stalls before its a2a"}]})
    # 7. Preconditions read from the dependencies. A forward-only capture (no backward op, DDP's forward named):
    # no GradScaler. A host-bound capture (8 ms of host work before each launch, kernels 0.3-4 ms): every fp32
    # GEMM ends before the next launch, so none is on the path (exact: 0 ms of it) and a faster GEMM only adds idle.
    fp32 = dict(device=dict(V100), gemm="fp32", autograd=True)
    scaler = r"GradScaler"
    out["forward_only_fp32"] = (Knobs(**fp32, forward_only=True), {
        "problems": [{"id": "fp32_gemm", "what": "fp32 GEMMs on a V100",
                      "any": [{"where": "finding", "rules": ["fp32_gemm"], "min_severity": "medium"}]}],
        "silent": [{"id": "no_grad_scaler", "why": "no backward op in the capture: nothing to scale",
                    "match": {"where": "finding", "text": scaler}}],
        "claims": [{"verdict": "wrong", "text": scaler, "why": "no backward op: a GradScaler has no loss to scale"},
                   {"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 GEMMs on a V100"}]})
    out["host_bound_fp32"] = (Knobs(**fp32, host_us=8000.0), {
        "problems": [{"id": "host_bound", "what": "8 ms of host work per launch: the GPU waits for the host",
                      "any": [{"where": "finding", "rules": ["host_bound"], "min_severity": "medium"}]}],
        "silent": [{"id": "no_gemm_gain", "why": "no fp32 GEMM is on the path: faster GEMMs only add idle",
                    "match": {"where": "finding", "rules": ["fp32_gemm"], "min_severity": "medium"}}],
        "claims": [{"verdict": "misleading", "rules": ["fp32_gemm"], "gain_ms": [0.0, 0.5], "gain_outside": True,
                    "why": "every fp32 GEMM ends before the next launch: 0 ms of them on the path"},
                   {"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 GEMMs, no gain while host-bound"},
                   {"verdict": "right", "rules": ["host_bound"], "why": "host-bound by construction"}]})
    out["autograd_fp32_twin"] = (Knobs(**fp32), {
        "problems": [{"id": "fp32_gemm_scaler", "what": "fp32 GEMMs on the path, with backward: fp16 + GradScaler",
                      "any": [{"where": "finding", "rules": ["fp32_gemm"], "text": scaler, "min_severity": "high"}]}],
        "silent": [{"id": "no_off_path_caveat", "why": "the GEMMs are queued back to back: all on the path",
                    "match": {"where": "finding", "text": r"only add idle"}}],
        "claims": [{"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 GEMMs on a V100, backward present"}]})
    return out
