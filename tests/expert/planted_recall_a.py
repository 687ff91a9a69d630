"""Planted scenarios for issue #34's recall on the recommendation-system (TorchRec) class: problems expert reviewers
named in the real torchrec/hta traces that no finding stated. Each with a silent twin; knobs: tests/expert/planted.py.
The exact answers are computed here from what the generator places (by arithmetic, not by llmdiag)."""

from __future__ import annotations

import datetime

from tests.expert.planted import Knobs

ALLOC = r"cudaFree|cudaMalloc|allocat|flush"
# The flush: FLUSH_FREES cudaFree of 3 ms, then 9 cudaMalloc of 4 ms, the device drained (planted.simulate), in step #12
# of 5; every other step allocates nothing inside its window. Its device idle: 8 × 3 + 9 × 4 = 60 ms, 12 ms per step.
FLUSH_FREES, FLUSH_MS = 8, 8 * 3.0 + 9 * 4.0
STALL_MS = 250.0  # rank 2's host stall before each all_to_all: steps of ~360 ms, where 12 ms is under 5 %


def recall_a_scenarios() -> dict[str, tuple[Knobs, dict]]:
    out = {}
    # b. A mid-capture allocator flush in a job whose steps a straggler makes long (torchrec sst_sleep: 101 ms of
    # idle in cudaFree/cudaMalloc in step 5 of 3, 41 ms per step against 1,096 ms steps): under 5 % of the mean
    # step, but 60 / 420 ms = 14 % of its own step. 8 frees against 9 mallocs (sst_sleep: 14 against 16): a
    # release of the cache and its refill, not growth.
    per_step = FLUSH_MS / 5
    out["allocator_flush_long_steps"] = (Knobs(flush_step=2, flush_frees=FLUSH_FREES, stall_rank=2,
                                               stall_ms=STALL_MS), {
        "problems": [{"id": "mid_flush", "what": "step #12 frees and refills the cache (8 cudaFree, 9 cudaMalloc)",
                      "any": [{"where": "finding", "rules": ["allocator_churn"], "text": r"mid-capture",
                               "step": 12, "min_severity": "medium"}]}],
        "silent": [{"id": "not_warmup", "why": "two normal steps came first: not warm-up",
                    "match": {"where": "finding", "text": r"warm-up growth|not paid again"}}],
        "claims": [{"verdict": "wrong", "rules": ["allocator_churn"], "gain_ms": [per_step - 0.05, per_step + 0.05],
                    "gain_outside": True, "why": "60 ms once in 5 steps: 12 ms per step"},
                   {"verdict": "right", "rules": ["allocator_churn"], "text": ALLOC, "why": "the mid-capture flush"},
                   {"verdict": "right", "rules": ["stragglers"], "rank": 2, "why": "rank 2's planted stall"}]})
    out["allocator_long_steps_twin"] = (Knobs(alloc_on=True, stall_rank=2, stall_ms=STALL_MS), {
        "problems": [], "claims": [{"verdict": "right", "rules": ["stragglers"], "rank": 2, "why": "planted stall"}],
        "silent": [{"id": "no_allocator_finding", "why": "3 cached cudaMalloc per step, no free: nothing to flush",
                    "match": {"where": "finding", "rules": ["allocator_churn"]}}]})
    out.update(forward_stall_scenarios())
    out.update(run_scenarios())
    out.update(codec_scenarios())
    return out


def forward_stall_scenarios() -> dict[str, tuple[Knobs, dict]]:
    """c. The forward half of a straggler's stall (torchrec sst_long_a2a_optimizer_3/_5: rank 2's main thread sits
    20.2 ms per step with no event inside `# running sparse arch`, right before its forward `_AlltoAllSingle`; its
    peers 0.05 ms): planted, rank 2 stalls 30 ms inside the same annotation before its forward all_to_all op, by
    construction 30.00 ms per step. Twin: the annotation on every rank and no stall."""
    out = {}
    out["region_stall_r2"] = (Knobs(stall_rank=2, stall_ms=30.0, region_stall=True), {
        "problems": [{"id": "forward_stall", "what": "rank 2's thread stalls 30 ms in its region before the a2a op",
                      "any": [{"where": "finding", "rules": ["stragglers"], "rank": 2,
                               "text": r"thread `tid 102` stalls.*# running sparse arch`, 30\.00 ms per step",
                               "min_severity": "medium"}]}],
        "silent": [{"id": "cause_shown", "why": "the stall is in the events: the region's 30 ms with no event",
                    "match": {"where": "finding", "text": r"does not show why"}}],
        "claims": [{"verdict": "wrong", "rules": ["stragglers"], "rank": 2, "gain_ms": [29.9, 30.1],
                    "gain_outside": True, "why": "rank 2 holds the others 30 ms per step"},
                   {"verdict": "right", "rules": ["stragglers"], "rank": 2, "why": "rank 2 stalls before its a2a"}]})
    # Both halves, as in the real sets: the backward's 80 ms inside its all_to_all op on the autograd thread (tid 202,
    # planted_causal's thread_stall_r2) and the forward's 30 ms in the region on the main thread (tid 102): 110 ms.
    out["forward_backward_stall_r2"] = (Knobs(stall_rank=2, stall_ms=30.0, region_stall=True, thread_stall_rank=2,
                                              thread_stall_ms=80.0), {
        "problems": [{"id": "both_halves", "what": "rank 2 stalls on two threads: 80 ms backward, 30 ms forward",
                      "any": [{"where": "finding", "rules": ["stragglers"], "rank": 2,
                               "text": r"host threads `tid 202` and `tid 102` stall.*110\.00 ms per step more.*"
                                       r"nccl:all_to_all`, 80\.00 ms per step; then `# running sparse arch` on "
                                       r"`tid 102`, 30\.00 ms per step"}]}],
        "silent": [], "claims": [{"verdict": "right", "rules": ["stragglers"], "rank": 2, "why": "by construction"}]})
    out["region_stall_twin"] = (Knobs(region_stall=True), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_straggler", "why": "the same region on every rank, no stall",
                    "match": {"where": "finding", "text": r"straggl|stalls"}}]})
    return out


def run_scenarios() -> dict[str, tuple[Knobs, dict]]:
    """d. A folder holding the job run twice (torchrec sst_long_a2a_optimizer_5_qcomm: pids 54105-54108 started
    20:59:27, 55988-55991 at 21:02:20 UTC): the headline, what a user reads first, says which run it describes and
    that the other was not analysed (before, only an issue among the warnings did). Planted: 2 runs 180 s apart,
    the newest analysed; twin: one run, no run named."""
    t0 = Knobs().t0 / 1e6 + 180.0  # the newest run's start, s since the epoch (planted.write: 180 s apart)
    start = datetime.datetime.fromtimestamp(t0, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    out = {}
    out["two_runs_headline"] = (Knobs(runs=2), {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "run_named", "field": "headline_text",
                      "regex": rf"run 2 of 2 in this input \(started {start}:\d\d UTC; not analysed: run 1\b",
                      "why": "two runs in the folder: the headline names the one analysed and the one left out"}]})
    out["one_run_headline_twin"] = (Knobs(), {
        "problems": [], "silent": [], "claims": [],
        "headline": [{"id": "no_run_named", "field": "headline_text", "regex": r"^(?!.*\bin this input\b)",
                      "why": "one run: nothing to name"}]})
    return out


CODEC_MS = 6.0  # the planted encode cast per step; the decode cast is half of it


def codec_scenarios() -> dict[str, tuple[Knobs, dict]]:
    """d. A quantized-comm codec's cost (torchrec sst_long_a2a_optimizer_5_qcomm: fp16 encode 4.68-4.86 ms and
    decode 2.18-2.44 ms of kernels per step under `## encoder fp16 None ##` / `## decoder fp16 None ##`, 7.1 ms
    per step, forward only). Planted: one 6 ms encode cast before the forward all_to_all and a 3 ms decode cast
    after it, in TorchRec's ranges: 9.00 ms per step; compute per step 12 x (3 + 0.4 + 4 + 0.5) + 6 x 0.3 + 9 =
    105.6 ms, so 8.5 %; the all_to_all kernels 2.5 + 2.0 = 4.5 ms per step. Twin: the same casts, no codec range."""
    enc, dec = CODEC_MS, CODEC_MS / 2
    compute = 12 * (3.0 + 0.4 + 4.0 + 0.5) + 6 * 0.3 + enc + dec
    text = (rf"{enc:.2f} ms of encode and {dec:.2f} ms of decode kernels per step \({100 * (enc + dec) / compute:.1f}% "
            rf"of its {compute:.2f} ms compute.*all_to_all kernels .* take 4\.50 ms per step")
    out = {}
    out["qcomm_codec"] = (Knobs(qcomm_ms=CODEC_MS), {
        "problems": [{"id": "codec_cost", "what": "the fp16 codec's 6 + 3 ms of casts per step",
                      "any": [{"where": "finding", "rules": ["comm_codec"], "text": text}]}],
        "silent": [], "claims": [{"verdict": "right", "rules": ["comm_codec"], "text": text, "why": "by construction"},
                                 {"verdict": "wrong", "rules": ["comm_codec"], "why": "a number off the planted one"}]})
    out["qcomm_codec_twin"] = (Knobs(qcomm_ms=CODEC_MS, qcomm_annotated=False), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_codec", "why": "the same casts, no codec range: the model's own dtype casts",
                    "match": {"where": "finding", "rules": ["comm_codec"]}}]})
    return out
