"""Planted scenarios for issue #34's capture recall (helper "capture"): a small device-to-host read that holds the
host while queued device work drains (hta/a100_16rank_alltoall_rank0: a 704-B `Memcpy DtoH (Device -> Pageable)`
under `aten::to` in `## sparse_data_dist ##`, ~145 ms per step), and the communication a sampled capture supports
(hta/sampled_pair). Each with a silent twin. The answers are arithmetic on the placed durations, written out by
hand here, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs
from tests.expert.planted_recall_h import _job

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
N, K_US, BYTES = 4, 5000.0, 704
# At each step's start (device drained, host at h0): 4 GEMMs of 5,000 µs launched at h0+10..h0+40, run back to back
# from h0+20 to h0+20,020; `cudaMemcpyAsync` at h0+60 under `## sparse_data_dist ##` ← `aten::to`, its 2-µs
# 704-B DtoH copy at h0+20,020 (the queue drained), the call returning at h0+20,030. The hold: 20,020 - 60 =
# 19,960 µs = 19.96 ms per step; the GEMMs starting inside it: 3 (at +5,020, +10,020, +15,020). The host resumes
# at h0+20,040; the next device op (the forward's first GEMM, launched then + Knobs.host_us 30 - 30) starts at
# h0+20,040 + 30 - 20 = h0+20,050, 28 µs after the copy's end (h0+20,022): 0.03 ms starved per step, under 5 % of
# the step: no gain claimed ("none now").
HOLD_MS = (N * K_US + 20.0 - 60.0) / 1000
# The twin: the same read first, nothing queued (the GEMMs launched after it returns): its copy starts 5 µs
# after the call, a hold under the 0.1-ms floor.


def _read(rk, k, facts, step, queued: bool = True):
    if step is None:
        return
    h0 = max(rk.h, rk.d)
    call = h0 + (60.0 if queued else 10.0)
    copy_at = h0 + 20.0 + N * K_US if queued else call + 5.0
    ret = copy_at + 10.0
    rk.cpu("## sparse_data_dist ##", call - 10.0, ret - call + 20.0, cat="user_annotation")
    rk.cpu("aten::to", call - 5.0, ret - call + 10.0)
    rk.corr += 1
    rk.runtime("cudaMemcpyAsync", call, ret - call, rk.corr)
    rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
                  "ts": copy_at, "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": rk.corr,
                                                      "bytes": BYTES}})
    first = h0 + 20.0 if queued else ret + 20.0
    for j in range(N):
        rk.kernel(GEMM, first + j * K_US, K_US, at=(h0 + 10.0 + 10.0 * j) if queued else ret + 5.0 + j)
    rk.h = ret + 10.0 if queued else ret + 10.0 + N
    rk.d = max(copy_at + 2.0, first + N * K_US)


def register(out: dict) -> None:
    held = rf"704 B, 2\.0 µs of copy\) under `aten::to` ← `## sparse_data_dist ##` holds the host {HOLD_MS:.2f} ms per step"
    out["held_read_queued"] = (Knobs(chore=_read), {
        "problems": [{"id": "held_read", "what": f"a 704-B DtoH read holds the host {HOLD_MS:.2f} ms per step "
                                                 "while 3 queued GEMMs drain",
                      "any": [{"where": "finding", "rules": ["held_read"],
                               "text": held + r"[\s\S]*up to 3 device ops[\s\S]*not for the copy[\s\S]*none now[^|]*starved only 0\.03 ms"}]}],
        "silent": [{"id": "no_pin_advice", "why": "the host waits on queued work: pinning does not remove it",
                    "match": {"where": "finding", "rules": ["host_sync", "pageable_copy"]}}],
        "claims": [{"verdict": "right", "rules": ["held_read"], "why": "the planted read, its hold by construction"}]})
    out["held_read_idle_twin"] = (Knobs(chore=partial(_read, queued=False)), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_held_read", "why": "nothing queued: the copy starts 5 µs after the call",
                    "match": {"where": "finding", "rules": ["held_read"]}}]})
    # The sampled job of planted_recall_h: its all-reduce (7,000 µs per 10,250-µs step, kept by the sample on both
    # ranks) is the recorded communication: 7.00 ms per step, a lower bound; the complete
    # twin gets no sampled caveat at all.
    out["sampled_comm_floor"] = (Knobs(writer=partial(_job, sampled=True)), {
        "problems": [{"id": "sampled_comm_floor", "what": "7.00 ms of recorded all-reduce per step, a lower bound",
                      "any": [{"where": "finding", "rules": ["sampled_capture"],
                               "text": r"communication kernels alone run 7\.00 ms \(rank 0\) per step \([^)]*; allreduce up "
                                       r"to 7\.00 ms per step\)[\s\S]*lower bound"}]}],
        "silent": [], "claims": [{"verdict": "right", "rules": ["sampled_capture"], "why": "by construction"}]})
    out["sampled_comm_floor_twin"] = (Knobs(writer=partial(_job, sampled=False)), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_sampled_caveat", "why": "a complete capture",
                    "match": {"where": "finding", "rules": ["sampled_capture"]}}]})
