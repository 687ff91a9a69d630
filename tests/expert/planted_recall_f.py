"""Planted scenarios for issue #34's recall (part f, communication): an exposed collective kind whose overlap a
well-hidden one lifts (hta/trace_diff test.json: all_to_all 53 % overlapped, the all-reduce 99 %, pooled 71 %),
with the silent twin where every kind is mostly hidden at the same exposed time.

Each job is written here (tests/gen/builder.py events, Knobs.writer), not by tests/expert/planted.py's simulation:
that job's collectives are exposed by construction. The exact answers below are arithmetic on the placed
durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import Knobs
from tests.gen.builder import TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
A100 = [{"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 85899345920}]
STEP, STEPS, RANKS = 12_300, 4, 2
# Per step (µs from the step's start), every rank alike: GEMM A [100, 8100] on stream 7 with an all-reduce
# [100, 7100] on stream 20 under it (hidden), then GEMM B [10100, 12100] queued behind the all_to_all on stream 21:
#   exposed job: all_to_all [8100, 10100], nothing under it: 2.00 ms exposed per step, 16.3 % of the 12.3 ms step;
#     all_to_all's own overlap 0 %, the all-reduce's 100 %, pooled 7000 / 9000 = 77.8 % (passes a pooled 70 % gate);
#   twin: all_to_all [2100, 10100], 6000 of its 8000 µs under GEMM A (75 %): the same 2.00 ms exposed per step,
#     pooled 13000 / 15000 = 86.7 %, every kind over 70 %: mostly hidden, no finding.
EXPOSED_MS = 2.0
COMPUTE_ONLY_MS = (1000 + 2000) / 1000  # GEMM A's 1000 µs after the all-reduce, GEMM B's 2000 µs: caps the gain


def _job(folder: str, prefix: str, a2a_start: int) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for r in range(RANKS):
        b = TraceBuilder(rank=r, world_size=RANKS, device_properties=A100)
        for k in range(1, STEPS + 1):
            k0 = (k - 1) * STEP
            b.step(k, k0, k0 + STEP)
            b.cpu_op("aten::mm", k0 + 2, 3)
            b.kernel(GEMM, k0 + 100, 8000, launch_at=k0 + 3)
            b.cpu_op("nccl:all_reduce", k0 + 6, 3)
            b.nccl("allreduce", k0 + 100, 7000, stream=20, nelems=1 << 16, group_size=RANKS, launch_at=k0 + 7)
            b.cpu_op("nccl:all_to_all", k0 + 10, 3)
            b.nccl("all_to_all", k0 + a2a_start, 10_100 - a2a_start, stream=21, nelems=1 << 16, group_size=RANKS,
                   name=SENDRECV, launch_at=k0 + 11)
            b.cpu_op("aten::mm", k0 + 14, 3)
            b.kernel(GEMM, k0 + 10_100, 2000, launch_at=k0 + 15)
        paths.append(b.write(os.path.join(folder, f"{prefix}_rank{r}.pt.trace.json.gz")))
    return paths


def recall_f_scenarios() -> dict[str, tuple[Knobs, dict]]:
    rng = [EXPOSED_MS - 0.01, EXPOSED_MS + 0.01]
    what = (f"an all_to_all nothing overlaps, {EXPOSED_MS:.2f} ms per {STEP / 1000:g} ms step, beside an all-reduce "
            "hidden under a GEMM that lifts the pooled overlap ratio to 77.8 %")
    return {
        "comm_kind_exposed": (Knobs(writer=partial(_job, a2a_start=8100)), {
            "problems": [{"id": "exposed_a2a", "what": what,
                          "any": [{"where": "finding", "rules": ["exposed_comm"], "gain_ms": rng,
                                   "text": r"alltoall( on pg '[^']*')? alone: overlap ratio 0\.0%, exposed 2\.00 ms per step"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["exposed_comm"], "gain_ms": rng, "gain_outside": True,
                        "why": f"the planted exposure is {EXPOSED_MS:.2f} ms per step (under the "
                               f"{COMPUTE_ONLY_MS:.2f} ms compute-only cap)"},
                       {"verdict": "right", "rules": ["exposed_comm"], "why": what}]}),
        "comm_kind_hidden_twin": (Knobs(writer=partial(_job, a2a_start=2100)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_exposed_comm", "why": "the same 2.00 ms exposed per step, but the all_to_all is 75 % "
                                                        "hidden and the all-reduce 100 %: every kind mostly hidden",
                        "match": {"where": "finding", "rules": ["exposed_comm", "dp_overlap", "tp_exposed"]}}]}),
        **_waits(), **recall_f_latency(),
    }


# tests/expert/planted.py's job with rank 2's host stalling 30 ms before each forward all_to_all: every peer's
# collectives are exposed 2.5 (forward all_to_all) + 3 x 3.0 (all-reduces) + 2.0 (backward all_to_all) = 13.5 ms
# per step of their own, plus 30.0 ms waiting for rank 2 at the forward all_to_all: 43.5 ms in all.
OWN_MS, WAIT_MS = 2.5 + 3 * 3.0 + 2.0, 30.0
WAITS_TEXT = (rf"rank [013] is exposed {OWN_MS + WAIT_MS:.2f} ms per step in all, of which {WAIT_MS:.2f} ms is waiting "
              r"for later peers at matched collectives, straggler rank\(s\) 2 among them")


def _waits() -> dict[str, tuple[Knobs, dict]]:
    what = (f"the peers' exposure, {OWN_MS + WAIT_MS:.1f} ms per step, is {WAIT_MS:.1f} ms of waiting for rank 2 "
            f"and {OWN_MS:.1f} ms of their own collectives: both parts named")
    return {
        "comm_waits_named": (Knobs(stall_rank=2, stall_ms=WAIT_MS), {
            "problems": [{"id": "exposure_split", "what": what,
                          "any": [{"where": "finding", "rules": ["exposed_comm"], "text": WAITS_TEXT}]}],
            "silent": [],
            "claims": [{"verdict": "misleading", "rules": ["exposed_comm"], "not_text": r"in all, of which",
                        "why": f"the net {OWN_MS:.1f} ms given as the exposure, the {WAIT_MS:.0f} ms wait unnamed"},
                       {"verdict": "wrong", "rules": ["exposed_comm"], "gain_ms": [OWN_MS - 0.1, OWN_MS + 0.01],
                        "gain_outside": True, "why": f"hiding them gains at most the own {OWN_MS:.1f} ms per step"},
                       {"verdict": "right", "rules": ["exposed_comm"], "why": what},
                       {"verdict": "right", "rules": ["stragglers"], "rank": 2,
                        "why": f"rank 2's host stalls {WAIT_MS:.0f} ms before each forward all_to_all"}]}),
        "comm_waits_twin": (Knobs(), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_wait_named", "why": "no rank stalls: nobody waits, no wait is taken out",
                        "match": {"where": "finding", "rules": ["exposed_comm"], "text": r"of which .* waiting"}}]}),
    }


# One traced rank of a 300-rank gloo job, CPU only (hta/cpu_only_rank-34's shape): per 200 ms ProfilerStep two
# all-reduces on two gloo threads, 170 ms each, starting 5 ms apart: 321,271 and 2,082,411 floats (mean message
# (321271 + 2082411) x 4 / 2 = 4,807,364 B = 4.58 MiB). A ring all-reduce over 300 ranks is 2 x 299 = 598 exchanges
# of 4,807,364 / 300 = 16,024 B (15.65 KiB) each, 170 / 598 = 0.28 ms per exchange; busbw = 4,807,364 B / 170 ms x
# 598 / 300 = 56.4 MB/s, under a tenth of a 10 Gb/s NIC's 1.25 GB/s; exposed: the union [10, 185] ms, 175 ms per
# step (87.5 %). The twin: the same ranks and times, 16 Mi and 10 Mi floats (mean 52 MiB): busbw 639 MB/s, 186 KB
# per exchange: a slow link's bytes, not the exchanges' count.
GLOO_N, GLOO_STEP, GLOO_MS = 300, 200_000, 170.0


def _gloo_job(folder: str, prefix: str, sizes: tuple[int, int]) -> list[str]:
    cfg = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "pg_size": GLOO_N,
            "ranks": list(range(GLOO_N))}]
    b = TraceBuilder(rank=34, world_size=GLOO_N, backend="gloo", pg_config=cfg, device_properties=[])
    for tid in (201, 202):
        b.thread_name(tid, "pt_gloo_runloop")
    for k in range(1, 4):
        k0 = (k - 1) * GLOO_STEP
        b.step(k, k0, k0 + GLOO_STEP)
        for j, (tid, n) in enumerate(zip((201, 202), sizes)):
            b.cpu_op("gloo:all_reduce", k0 + 10_000 + 5_000 * j, GLOO_MS * 1000, tid=tid, cat="user_annotation",
                     args={"Input Dims": [[n]], "Input type": ["float"]})
        b.cpu_op("aten::empty", k0 + GLOO_STEP - 100, 5)
    os.makedirs(folder, exist_ok=True)
    return [b.write(os.path.join(folder, f"{prefix}_rank34.pt.trace.json.gz"))]


def recall_f_latency() -> dict[str, tuple[Knobs, dict]]:
    what = ("two gloo all-reduces per step over 300 ranks, 4.58 MiB mean, 170 ms each: 598 ring exchanges of "
            "15.65 KiB, 0.28 ms each; busbw 56.4 MB/s")
    text = (r"allreduce over 300 ranks \(gloo\).*mean message 4\.58 MiB, 170\.00 ms each; busbw 56\.\d MB/s.*598 "
            r"sequential exchanges of 15\.65 KiB each: 0\.28 ms per exchange.*exposed 175\.00 ms per step")
    return {
        "gloo_latency_bound": (Knobs(writer=partial(_gloo_job, sizes=(321_271, 2_082_411))), {
            "problems": [{"id": "latency_bound", "what": what,
                          "any": [{"where": "finding", "rules": ["comm_latency_bound"], "text": text}]}],
            "silent": [],
            "claims": [{"verdict": "right", "rules": ["comm_latency_bound"], "why": what},
                       {"verdict": "right", "rules": ["contaminated_timings"], "why": "CPU only by construction"}]}),
        "gloo_bandwidth_twin": (Knobs(writer=partial(_gloo_job, sizes=(16 * 2**20, 10 * 2**20))), {
            "problems": [], "claims": [{"verdict": "right", "rules": ["contaminated_timings"], "why": "CPU only"}],
            "silent": [{"id": "no_latency_bound", "why": "the same 170 ms all-reduces carry 52 MiB: busbw 639 MB/s, "
                                                         "186 KB per exchange",
                        "match": {"where": "finding", "rules": ["comm_latency_bound"]}}]}),
    }
