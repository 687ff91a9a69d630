"""Planted scenarios for issue #34's recall (helper a2a): a job with a straggler AND an all_to_all whose own
transfer nothing overlaps, and the silent twin whose exchange runs under compute (only the straggler finding).

Why: on torchrec sst_long_a2a_optimizer_5_qcomm (truth A3 problem 5, "exposed a2a as in A1") llmdiag names the
straggler but no exposed communication. Read from the events, each rank's exposed communication there splits
into its exposed wait for a later peer and its own transfer (run 2, mean over the 3 steps: 7.5 ms per step of
own transfer, 3.3 % of the 229 ms mean step, under the rule's 5 % floor; its simulated gain now is ~0, since
rank 2's host stall paces the step). These check the class where the own part is material: it is stated, with
the wait (all of it exposed, or half under compute) taken out and named as the straggler's, and the straggler
alone where the exchange is hidden.

The jobs are written here (tests/gen/builder.py events, Knobs.writer); the answers are arithmetic on the placed
times, written out by hand below, never read back from llmdiag.

Per step (µs from the step's start), 4 ranks, 5 steps of 19.3 ms:
  GEMM A [100, 8100] on stream 7 under a profiled host op (`torchrec::input_dist`, [10, 8080]) inside the user
  region `# running sparse arch` that ends at the all_to_all's launch;
  ranks 0, 1, 3 launch the all_to_all at 8095: it begins at 8100; rank 2's host stalls 4.0 ms with no profiled
  op before launching it: it begins at 12100; the exchange then moves its bytes for 3.0 ms on every rank and
  ends at 15100 everywhere (SendRecv on stream 21; no message sizes, as TorchRec's traces);
  GEMM B [15100, 19100] on stream 7, launched right after the all_to_all, waits for it (its input);
  the host synchronizes (`cudaDeviceSynchronize`) until 19110.
Exposed job: nothing else runs, so
  ranks 0/1/3: exposed [8100, 15100] = 7.00 ms = 4.00 ms waiting for rank 2 (no compute under it) + 3.00 own;
  rank 2: exposed [12100, 15100] = 3.00 ms, no wait; its device idles [8100, 12100] (its host stall);
  net exposure 3.00 ms per step on every rank; hiding it saves 3.00 ms per step, fixing the
  straggler 4.00 ms (the exchange at 8100 on every rank: GEMM B at 11100), both 7.00 ms: the gains add up, so
  counting each once is 3.00 + 4.00.
Wait under compute: the same with GEMM A [100, 10100]: ranks 0/1/3 wait [8100, 12100], the first 2.00 ms of it
  under GEMM A: exposed [10100, 15100] = 5.00 ms = 2.00 ms of exposed wait + the own 3.00 ms; rank 2 exposed 3.00
  (its device idles [10100, 12100]): net 3.00 ms per step; hiding it saves 3.00 ms now (the exchange at zero
  time: GEMM B from 12100, rank 2's arrival, not 15100). Fixing the straggler saves 4.00 ms (the exchange [8100, 11100],
  GEMM B [11100, 15100]); both together 5.00 ms, not 7.00: once rank 2 is on time the exchange runs 2.00 ms under
  GEMM A on every rank, so 2.00 ms of the two findings' gains is the same time (each gain holds alone; the rule
  takes out only the exposed wait, so their sum over-counts here: open, docs/recommendations.md exposed_comm).
  The expectation pins the split (5.00 in all, 2.00 of it waiting) and a gain between the after-fix 1.00 and the
  now 3.00 ms.
Slow link: the exposed job with message sizes, 2^20 floats (4 MiB) per rank: moved in the 3.00 ms transfer, busbw
  4,194,304 B / 3 ms × 3/4 = 1.05 GB/s (under half of the V100's 130 GB/s: low_busbw); read over the peers' 7.00 ms
  kernels, wait included, it would be 0.45 GB/s (mean over the ranks 0.60). A faster link shortens the transfer
  only: 3.00 × (1 − 1.049 / 104.0) = 2.97 ms per step, never the 4.00 ms wait.
Hidden twin: the exposed job, plus a kernel C [100, 15100] on stream 8 on every rank (independent of the exchange):
  every all_to_all (wait and transfer) lies under C: nothing exposed; the straggler still costs 4.00 ms (on time,
  GEMM B runs [11100, 15100], C still ends at 15100).
"""

from __future__ import annotations

import os
from functools import partial

from tests.expert.planted import Knobs
from tests.gen.builder import TraceBuilder

GEMM = "volta_h884gemm_128x128_ldg8_nn"  # fp16 tensor-core GEMMs: no precision finding beside the pair
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
V100 = [{"name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 16945709056}]
STEP, STEPS, RANKS, LATE = 19_300, 5, 4, 2
ARRIVE, STALL, TRANSFER = 8100, 4000, 3000  # the punctual ranks' arrival, rank 2's lateness, the transfer (µs)
END = ARRIVE + STALL + TRANSFER  # 15100: the exchange ends on every rank
OWN_MS, WAIT_MS = TRANSFER / 1000, STALL / 1000
GAIN = [OWN_MS - 0.01, OWN_MS + 0.01]


def _job(folder: str, prefix: str, hidden: bool, a_end: int = ARRIVE, nelems: int | None = None) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for r in range(RANKS):
        b = TraceBuilder(rank=r, world_size=RANKS, device_properties=V100)
        for k in range(1, STEPS + 1):
            k0 = (k - 1) * STEP
            b.step(k, k0, k0 + STEP)
            b.cpu_op("aten::mm", k0 + 2, 3)
            b.kernel(GEMM, k0 + 100, a_end - 100, launch_at=k0 + 3)
            if hidden:  # independent compute beside the exchange on every rank
                b.cpu_op("aten::bmm", k0 + 6, 3)
                b.kernel(GEMM, k0 + 100, END - 100, stream=8, launch_at=k0 + 7)
            at = ARRIVE + (STALL if r == LATE else 0)  # rank 2: 4 ms with no profiled op before the launch
            b.annotation("# running sparse arch", k0 + 9, at - 9)  # the user region holding it, as TorchRec's
            b.cpu_op("torchrec::input_dist", k0 + 10, 8070)
            b.cpu_op("nccl:all_to_all", k0 + at - 8, 6)
            b.nccl("all_to_all", k0 + at, END - at, stream=21, group_size=RANKS, name=SENDRECV, nelems=nelems,
                   launch_at=k0 + at - 5)
            b.cpu_op("aten::mm", k0 + at + 2, 3)
            b.kernel(GEMM, k0 + END, 4000, launch_at=k0 + at + 3)
            b.cpu_op("cudaDeviceSynchronize", k0 + at + 10, END + 4010 - at - 10, cat="cuda_runtime")
        paths.append(b.write(os.path.join(folder, f"{prefix}_rank{r}.pt.trace.json.gz")))
    return paths


STRAGGLER_RIGHT = {"verdict": "right", "rules": ["stragglers"], "rank": LATE,
                   "why": f"rank {LATE}'s host stalls {WAIT_MS:.0f} ms before each all_to_all"}


def register(out: dict) -> None:
    what = (f"every rank's all_to_all moves its bytes for {OWN_MS:.2f} ms with nothing beside it, after ranks 0/1/3 "
            f"wait {WAIT_MS:.2f} ms for rank {LATE} (no compute under the wait): the own {OWN_MS:.2f} ms stated, "
            "the wait named as the straggler's")
    split = (rf"exposed {OWN_MS:.2f} ms per step .*rank [013] is exposed {OWN_MS + WAIT_MS:.2f} ms per step in all, "
             rf"of which {WAIT_MS:.2f} ms is waiting for later peers at matched collectives, straggler rank\(s\) "
             rf"{LATE} among them")
    out["a2a_straggler_own_exposed"] = (Knobs(writer=partial(_job, hidden=False)), {
        "problems": [{"id": "own_exchange", "what": what,
                      "any": [{"where": "finding", "rules": ["exposed_comm"], "gain_ms": GAIN, "text": split}]},
                     {"id": "straggler", "what": f"rank {LATE} late by {WAIT_MS:.2f} ms at every all_to_all",
                      "any": [{"where": "finding", "rules": ["stragglers"], "rank": LATE,
                               "gain_ms": [WAIT_MS - 0.01, WAIT_MS + 0.01]}]}],
        "silent": [],
        "claims": [{"verdict": "wrong", "rules": ["exposed_comm"], "gain_ms": GAIN, "gain_outside": True,
                    "why": f"hiding the exchange saves its own {OWN_MS:.2f} ms per step; the wait is the straggler's"},
                   {"verdict": "right", "rules": ["exposed_comm"], "why": what}, STRAGGLER_RIGHT]})
    under = (rf"exposed {OWN_MS:.2f} ms per step .*rank [013] is exposed {OWN_MS + 2.0:.2f} ms per step in all, "
             r"of which 2\.00 ms is waiting for later peers at matched collectives, straggler rank\(s\) "
             rf"{LATE} among them")
    out["a2a_straggler_wait_under_compute"] = (Knobs(writer=partial(_job, hidden=False, a_end=ARRIVE + 2000)), {
        "problems": [{"id": "own_exchange", "what": "the peers' 4.00 ms wait for rank 2 half under GEMM A: only its "
                                                    "exposed 2.00 ms taken out, the own 3.00 ms stated",
                      "any": [{"where": "finding", "rules": ["exposed_comm"], "text": under}]}],
        "silent": [],
        "claims": [{"verdict": "wrong", "rules": ["exposed_comm"], "gain_ms": [OWN_MS - 2.0, OWN_MS + 0.01],
                    "gain_outside": True, "why": "hiding the exchange saves 3.00 ms now, 1.00 ms once rank 2 is on "
                                                 "time; the exposed wait is the straggler's"},
                   {"verdict": "right", "rules": ["exposed_comm"], "why": "the own transfer, the wait named"},
                   STRAGGLER_RIGHT]})
    bw = 4 * 2**20 / (TRANSFER * 1e-6) * (RANKS - 1) / RANKS / 1e9  # GB/s over the transfer alone
    link = OWN_MS * (1 - bw / (0.8 * 130.0))  # the V100's NVLink reference, 80 % of it the target
    out["a2a_straggler_slow_link"] = (Knobs(writer=partial(_job, hidden=False, nelems=1 << 20)), {
        "problems": [{"id": "slow_link", "what": f"the transfer moves 4 MiB per rank in {OWN_MS:.2f} ms: busbw "
                                                 f"{bw:.2f} GB/s, read over the transfer, not the peers' wait",
                      "any": [{"where": "finding", "rules": ["low_busbw"], "gain_ms": [link - 0.01, link + 0.01],
                               "text": rf"busbw {bw:.1f} GB/s \(mean over straggler rank\(s\) {LATE}"}]},
                     {"id": "own_exchange", "what": what,
                      "any": [{"where": "finding", "rules": ["exposed_comm"], "gain_ms": GAIN, "text": split}]}],
        "silent": [],
        "claims": [{"verdict": "wrong", "rules": ["low_busbw"], "gain_ms": [0.0, OWN_MS + 0.01], "gain_outside": True,
                    "why": f"a faster link shortens the {OWN_MS:.2f} ms transfer, not the wait for rank {LATE}"},
                   {"verdict": "misleading", "rules": ["low_busbw"], "text": r"busbw 0\.[0-9]+ GB/s|MB/s",
                    "why": "bandwidth read over kernels that also hold the wait for the straggler"},
                   {"verdict": "right", "rules": ["low_busbw"], "why": f"busbw {bw:.2f} GB/s by construction"},
                   {"verdict": "wrong", "rules": ["exposed_comm"], "gain_ms": GAIN, "gain_outside": True,
                    "why": f"hiding the exchange saves its own {OWN_MS:.2f} ms per step"},
                   {"verdict": "right", "rules": ["exposed_comm"], "why": what}, STRAGGLER_RIGHT]})
    out["a2a_straggler_hidden_twin"] = (Knobs(writer=partial(_job, hidden=True)), {
        "problems": [{"id": "straggler", "what": f"rank {LATE} late by {WAIT_MS:.2f} ms at every all_to_all",
                      "any": [{"where": "finding", "rules": ["stragglers"], "rank": LATE}]}],
        "claims": [STRAGGLER_RIGHT],
        "silent": [{"id": "no_exposed_comm", "why": "the same straggler, every all_to_all (wait and transfer) under "
                                                    "an independent kernel: nothing exposed",
                    "match": {"where": "finding", "rules": ["exposed_comm", "dp_overlap", "tp_exposed"]}}]})
