"""A collective whose launch preceded the capture: its kernel is in the trace, its launch and its
`record_param_comms` are not (issue #27 item 1, the TorchRec sleep run). It is still a collective of its
stream's kind and group, so a rank whose capture started after it ended is named as lacking it.

Generated 4-rank TorchRec-like traces: per step an all_to_all (an argless `ncclDevKernel_SendRecv` launched
under `record_param_comms` with the all_to_all's args), an all-reduce and a second all_to_all, all on the
NCCL stream; each collective ends together on every rank (10 µs apart). The answers are the plant's."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

W = 4
STEPS = 4
STEP_US = 20_000
A2A = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
# (kernel, collective name, start µs in the step, end µs in the step)
PLAN = [(A2A, "all_to_all", 1000, 3000), (AR, "allreduce", 5000, 5500), (A2A, "all_to_all", 8000, 9000)]


def _args(coll: str) -> dict:
    return {"Collective name": coll, "dtype": "Float", "In msg nelems": 4096, "Out msg nelems": 4096,
            "Group size": W, "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": list(range(W))}


def _write(folder, launchless: set[int], missing: set[int], first_pair: bool = False) -> None:
    """Every rank records STEPS steps; on the ranks in `launchless` the job's first collective (step 1's first
    all_to_all) has its kernel but no launch; the ranks in `missing` lack it altogether (capture started after
    it ended). `first_pair`: a second all_to_all ends 100 µs after that first one (two of one kind ending
    together at the capture's edge), and the ranks in `missing` lack the all-reduce before it instead (on the
    `launchless` ranks launched before the capture too: one stream runs its kernels in launch order)."""
    for r in range(W):
        b = TraceBuilder(rank=r, world_size=W, host_name="node0")
        first_step_at = 3500 if r in missing and not first_pair else 0
        for k in range(STEPS):
            k0 = k * STEP_US
            at = k0 + (first_step_at if k == 0 else 0)
            b.step(k + 1, at, k0 + STEP_US)
            b.kernel("void embedding_lookup_kernel<float>()", at + 100, 600, stream=7, launch_at=at + 1)
            plan = list(PLAN)
            if first_pair and k == 0:  # an all-reduce first, then the launchless all_to_all and its twin
                plan = [(AR, "allreduce", 200, 400), (A2A, "all_to_all", 1000, 3000), (A2A, "all_to_all", 3005, 3100),
                        *PLAN[1:]]
            for j, (name, coll, s, e) in enumerate(plan):
                lead = (k, j) == (0, 1 if first_pair else 0)  # the collective launched before the capture
                early = k == 0 and j <= (1 if first_pair else 0)  # launched before it: the stream runs in order
                if first_pair and (k, j) == (0, 0) and r in missing:
                    continue
                if lead and not first_pair and r in missing:
                    continue
                start, end = k0 + s + 30 * r, k0 + e + 10 * r
                if first_pair and lead and r in missing:  # it ends as the others' next all_to_all does (real:
                    end = k0 + e + 100  # a 0.1-0.4 ms spread at TorchRec's first all_to_all)
                if early and r in launchless:
                    b.kernel(name, start, end - start, stream=20, launch=False)
                    continue
                op = max(at + 2, start - 400)
                b.cpu_op("record_param_comms", op, 5, args=_args(coll))
                b.kernel(name, start, end - start, stream=20, launch_at=op + 1)
        b.write(f"{folder}/rank{r}.json")


def _lead(a) -> dict[int, int]:
    return {w.rank: w.lead_n for w in a.skew.capture_windows if w.lead_n}


def test_a_rank_lacking_a_collective_launched_before_the_others_captures(tmp_path):
    """Ranks 0, 1, 3 hold the first all_to_all's kernel without its launch; rank 2's capture starts after it."""
    _write(tmp_path, launchless={0, 1, 3}, missing={2})
    a = analyze_path(str(tmp_path), jobs=1)
    assert _lead(a) == {2: 1}
    assert any("rank 2's capture starts 1 collective" in i.message for i in a.issues)
    (x,) = [c for c in a.skew.by_collective if c.kind == "alltoall"]
    assert x.matched == 2 * STEPS - 1  # every all_to_all all four ranks recorded; the one rank 2 lacks left out


def test_silent_twin_every_launch_present(tmp_path):
    """The same job, every rank's capture holding the first all_to_all and its launch: nobody is late."""
    _write(tmp_path, launchless=set(), missing=set())
    a = analyze_path(str(tmp_path), jobs=1)
    assert _lead(a) == {}
    assert not any("capture starts" in i.message for i in a.issues)
    (x,) = [c for c in a.skew.by_collective if c.kind == "alltoall"]
    assert x.matched == 2 * STEPS


def test_silent_twin_every_rank_launchless(tmp_path):
    """Every rank holds the first all_to_all's kernel without its launch: they all recorded it, nobody is late."""
    _write(tmp_path, launchless=set(range(W)), missing=set())
    a = analyze_path(str(tmp_path), jobs=1)
    assert _lead(a) == {}
    (x,) = [c for c in a.skew.by_collective if c.kind == "alltoall"]
    assert x.matched == 2 * STEPS


@pytest.mark.parametrize("launchless", [{0, 1, 3}, set(range(W))])
def test_two_all_to_alls_ending_together_at_the_capture_edge(tmp_path, launchless):
    """Rank 2 lacks only the job's first all-reduce; the launchless all_to_all and the next one end 100 µs
    apart, rank 2's first as late as the others' second. Each rank's first all_to_all is matched with the
    others' first, not their second."""
    _write(tmp_path, launchless=launchless, missing={2}, first_pair=True)
    a = analyze_path(str(tmp_path), jobs=1)
    assert _lead(a) == {2: 1}
    (x,) = [c for c in a.skew.by_collective if c.kind == "alltoall"]
    assert x.matched == 2 * STEPS + 1
