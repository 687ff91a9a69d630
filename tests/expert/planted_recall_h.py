"""Planted scenarios for the event-sampled capture (hta/sampled_pair, the fresh review): a two-rank job whose
all-reduce runs under a GEMM, captured complete (the twin: its critical path stated, nothing exposed) and
event-sampled (most host ops dropped, their ids left with holes, and the GEMM under the all-reduce dropped with
its launch). On the sampled capture the all-reduce reads 100 % exposed, 7.00 ms of the 10.25 ms step, yet the
compute under it is only missing from the sample: no rank's or the job's critical path is stated
(`critical_path_note`), and no communication-exposure finding fires at medium or above.

Each job is written here (tests/gen/builder.py events, Knobs.writer). The answers below are arithmetic on the
placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import Knobs
from tests.gen.builder import TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
A100 = [{"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 85899345920}]
STEP, STEPS, RANKS, FILLERS, KEEP = 10_250, 10, 2, 36, 6
# Per step (µs from its start), every rank alike: 36 `aten::view` ops [10, 118], GEMM A [200, 8200] on stream 7
# with the all-reduce [200, 7200] on stream 20 under it (hidden: 0 ms exposed), GEMM B [8200, 10200].
# Sampled: 1 host op in KEEP=6 kept (External ids 6-7 apart: under 90 % consecutive), GEMM A and its launch
# dropped: the all-reduce's 7000 µs have nothing under them, 7.00 ms exposed per step (68 % of the step).
AR_MS = 7.0


def _job(folder: str, prefix: str, sampled: bool, only: int | None = None) -> list[str]:
    """`only`: sample that rank alone (a job of sampled and complete ranks)."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for r in range(RANKS):
        sampled_r = sampled and (only is None or r == only)
        b = TraceBuilder(rank=r, world_size=RANKS, device_properties=A100)
        drop: set[int] = set()  # ids of the events the sample leaves out
        n = 0
        for k in range(1, STEPS + 1):
            k0 = (k - 1) * STEP
            b.step(k, k0, k0 + STEP)
            for i in range(FILLERS):
                b.cpu_op("aten::view", k0 + 10 + 3 * i, 2)
                n += 1
                if n % KEEP and sampled_r:
                    drop.add(b._ext)
            b.cpu_op("aten::mm", k0 + 120, 3)
            b.kernel(GEMM, k0 + 200, 8000, launch_at=k0 + 121)
            if sampled_r:
                drop.update({b._ext - 1, b._ext})  # the op and its GEMM with the launch (one External id)
            b.cpu_op("nccl:all_reduce", k0 + 126, 3)
            b.nccl("allreduce", k0 + 200, int(AR_MS * 1000), stream=20, nelems=1 << 16, group_size=RANKS,
                   launch_at=k0 + 127)
            b.cpu_op("aten::mm", k0 + 132, 3)
            b.kernel(GEMM, k0 + 8200, 2000, launch_at=k0 + 133)
        if sampled_r:
            b.events = [e for e in b.events if e.get("args", {}).get("External id") not in drop
                        or str(e.get("name", "")).startswith("ProfilerStep#")]
        paths.append(b.write(os.path.join(folder, f"{prefix}_rank{r}.pt.trace.json.gz")))
    return paths


COMM = ["exposed_comm", "dp_overlap", "tp_exposed", "low_busbw", "moe_exposed_a2a", "comm_latency_bound"]


def recall_h_scenarios() -> dict[str, tuple[Knobs, dict]]:
    no_comm = {"id": "no_comm_exposure_claim", "match": {"where": "finding", "rules": COMM, "min_severity": "medium"},
               "why": f"the all-reduce's {AR_MS:.2f} ms read as exposed are the sample's dropped GEMM: whether the step "
                      "waits on it cannot be told"}
    return {
        "sampled_comm_unmeasured": (Knobs(writer=partial(_job, sampled=True)), {
            "problems": [{"id": "sampled_capture", "what": "host ops' External ids 6-7 apart: an event-sampled capture",
                          "any": [{"where": "finding", "rules": ["sampled_capture"], "text": r"lower bound"}]}],
            "silent": [no_comm],
            "claims": [{"verdict": "right", "rules": ["sampled_capture"], "why": "1 host op in 6 kept by construction"},
                       {"verdict": "unverified", "rules": ["host_bound", "launch_bound", "stragglers"],
                        "why": "event-sampled: the device idle is the dropped GEMM, not host time"}]}),
        "sampled_comm_unmeasured_twin": (Knobs(writer=partial(_job, sampled=False)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_sampled_capture", "why": "External ids consecutive: a complete capture",
                        "match": {"where": "finding", "rules": ["sampled_capture"]}},
                       dict(no_comm, why="the all-reduce runs under GEMM A: nothing exposed")]}),
    }
