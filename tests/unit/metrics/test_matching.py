"""Cross-rank matching of every communication (issue 13 item 5) on generated traces with exact answers.

TorchRec-like: 8 ranks, per step an embedding all_to_all (old NCCL runs it as `ncclKernel_SendRecv`; the kind
comes from the `all_to_all` collective name), a dense all_to_all and an all-reduce. Three ranks reach the
first all_to_all 7.1, 7.4 and 7.6 ms after the earliest; the answers below are written from those offsets.
"""

from __future__ import annotations

import orjson
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.analysis import Analysis
from tests.gen.builder import TraceBuilder
from tests.gen.pipeline import Case, write

W = 8
LATE_US = {2: 7100, 6: 7400, 5: 7600}  # rank -> arrival after rank 0 at the first all_to_all
JITTER_US = {r: 20 * r for r in range(W) if r not in LATE_US}  # the punctual ranks: 0 .. 140 µs
STEP_US = 30_000
A2A = "ncclKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def _split(r: int) -> tuple[list[int], list[int]]:
    return [1000 * (r + 1)] * W, [1000 * (p + 1) for p in range(W)]  # rank r sends (r+1) k to each, gets (p+1) k


def _a2a_args(r: int) -> dict:
    ins, outs = _split(r)
    return {"Collective name": "all_to_all", "dtype": "Float", "In msg nelems": sum(ins), "Out msg nelems": sum(outs),
            "Group size": W, "In split size": ins, "Out split size": outs, "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": list(range(W))}


def _torchrec(folder, steps: int = 3) -> None:
    for r in range(W):
        b = TraceBuilder(rank=r, world_size=W, host_name="node0")
        for k in range(steps):
            k0 = k * STEP_US
            b.step(k + 1, k0, k0 + STEP_US)
            arrive = 1000 + LATE_US.get(r, JITTER_US.get(r, 0))
            b.kernel("void embedding_lookup_kernel<float>()", k0 + 500, arrive - 500, stream=7, launch_at=k0 + 5)
            end1 = 1000 + max(LATE_US.values()) + 400
            b.cpu_op("record_param_comms", k0 + 10, 3, args=_a2a_args(r))
            b.kernel(A2A, k0 + arrive, end1 - arrive, stream=20, launch_at=k0 + 11, args=_a2a_args(r))
            b.kernel("void gemm_kernel<float>()", k0 + end1, 5000, stream=7, launch_at=k0 + 20)
            s2 = end1 + 5000 + 10 * r  # the dense all_to_all: 10 µs apart
            b.kernel(A2A, k0 + s2, end1 + 5000 + 10 * W + 300 - s2, stream=20, launch_at=k0 + 21, args=_a2a_args(r))
            b.nccl("allreduce", k0 + end1 + 6000, 500, launch_at=k0 + 22, nelems=1 << 20, group_size=W,
                   pg_ranks=list(range(W)))
        b.write(f"{folder}/rank{r}.json")


def test_torchrec_late_ranks_at_first_all_to_all(tmp_path):
    _torchrec(tmp_path)
    sk = analyze_path(str(tmp_path), jobs=1).skew
    kinds = {(c.kind, c.matched) for c in sk.by_collective}
    assert ("alltoall", 6) in kinds and ("allreduce", 3) in kinds  # 2 all_to_all a step, 3 steps: all matched
    top = sk.late[:3]
    assert {x.ordinal for x in top} == {0, 2, 4}  # the first all_to_all of each step is the most skewed
    for x in top:
        assert x.kind == "alltoall" and x.ranks == W
        assert x.skew_ms == pytest.approx(7.6)
        assert x.late_ranks == [2, 6, 5]  # in arrival order
        assert x.late_ms == pytest.approx([7.1, 7.4, 7.6])
        assert x.transfer_ms == pytest.approx(0.4)  # the last rank's duration: the exchange itself
        assert x.in_nelems == {str(r): sum(_split(r)[0]) for r in range(W)}
        assert x.out_nelems == {str(r): sum(_split(r)[1]) for r in range(W)}
    assert sk.late[3].skew_ms == pytest.approx(0.07)  # the dense all_to_all: 7 × 10 µs
    # Σ lateness where late, per rank: three first all_to_alls each, plus rank 7 last at the dense one.
    late = {int(r): v for r, v in sk.late_ms_by_rank.items()}
    for r, us in LATE_US.items():
        assert late[r] == pytest.approx(3 * us / 1000)
    assert late[7] == pytest.approx(3 * 0.07)  # evenly spread arrivals: the last alone is late
    assert set(late) == set(LATE_US) | {7}
    assert sk.late[3].late_ranks == [7]
    # Wait imposed: where a rank alone is last, its start − the second-latest start (what the others would save
    # had it alone been on time): the latest of the late group over the next, and rank 7 10 µs after rank 6.
    imposed = {int(r): v for r, v in sk.imposed_ms_by_rank.items()}
    (second, _), (worst, last) = sorted((us, r) for r, us in LATE_US.items())[-2:]
    assert imposed == pytest.approx({last: 3 * (worst - second) / 1000, 7: 3 * 0.01})
    # Wait (latest start − own start) per rank: rank 0 waits 7.6 ms at each first all_to_all + 70 µs at the dense one.
    assert sk.wait_ms_by_rank["0"] == pytest.approx(3 * (7.6 + 0.07))
    assert "5" not in sk.wait_ms_by_rank or sk.wait_ms_by_rank["5"] == pytest.approx(3 * 0.02)


def test_send_recv_matched_to_peer(tmp_path):
    """The generated 4-stage pipeline's transfers: each send matched with its receive, wait and transfer from
    the simulation's own post times (a send posted first: the receiver was late)."""
    case = Case(4, 8, "1f1b", slow_stage=2, lat_us=25, steps=2)
    ans = write(case, tmp_path)
    got = {(x.src, x.dst): x for x in analyze_path(str(tmp_path), jobs=1).skew.p2p}
    want = {}
    for x in ans.transfers:
        want.setdefault((x["src"], x["dst"]), []).append(x)
    assert set(got) == set(want)
    for pair, xs in want.items():
        g = got[pair]
        assert (g.matched, g.unmatched) == (case.steps * len(xs), 0)
        assert g.mean_transfer_ms == pytest.approx(case.lat_us / 1000)
        assert g.mean_wait_ms == pytest.approx(sum(abs(x["send"] - x["recv"]) for x in xs) / len(xs) / 1000)
        assert g.sender_waits == case.steps * sum(x["send"] < x["recv"] for x in xs)
        assert g.receiver_waits == case.steps * sum(x["recv"] < x["send"] for x in xs)
    # Backward transfers into the slow stage's neighbour: stage 1 waits on stage 2's gradients.
    assert got[(2, 1)].receiver_waits > 0


def test_matches_survive_the_json_edge(tmp_path):
    """late[], p2p[] and the per-rank sums are read back from the summary as written."""
    write(Case(2, 4, "1f1b", lat_us=10), tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.skew.p2p and a.skew.late and a.pipeline.inferred
    b = Analysis.from_dict(orjson.loads(orjson.dumps(a.to_dict())))
    assert b.skew == a.skew and b.pipeline.inferred


@pytest.mark.parametrize("with_seq", [True, False])
def test_collectives_matched_by_sequence_number(tmp_path, with_seq):
    """Rank 1's trace starts one all-reduce later than rank 0's. With Kineto's `Seq` the collectives match
    by number; without it by completion time (each ends 0.1 ms apart on the two ranks, the next one 10 ms
    later): skew 0.1 ms each either way, never the 10.1 ms of pairing by order; rank 0's first all-reduce
    is left out and rank 1's late capture named."""
    for r in range(2):
        b = TraceBuilder(rank=r, world_size=2)
        b.step(1, 0, 50_000)
        for n in range(1 if r else 0, 4):
            start = 1000 + n * 10_000 + 100 * r
            b.nccl("allreduce", start, 500, launch_at=10 + n, nelems=1024, group_size=2, pg_ranks=[0, 1])
            if with_seq:
                b.events[-1]["args"]["Seq"] = n + 1 if r == 0 else str(n + 1)  # a number or its text
        b.write(tmp_path / f"rank{r}.json")
    tracks = {}
    a = analyze_path(str(tmp_path), jobs=1, tracks=tracks)
    (c,) = a.skew.by_collective
    assert (c.matched, c.max_skew_ms) == (3, pytest.approx(0.1))
    (w,) = a.skew.capture_windows
    assert (w.rank, w.lead_n, w.trail_n) == (1, 1, 0)
    assert any("rank 1's capture starts 1 collective" in i.message for i in a.issues)
    # The timeline's straggler waits use the same matching: one wait per matched collective, the skew's size.
    from llmdiag.diagnose.export.timeline import build_timeline

    waits = [e["dur"] / 1000 for e in build_timeline(a, tracks)["traceEvents"]
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("straggler wait")]
    assert len(waits) == 3 and max(waits) == pytest.approx(c.max_skew_ms, abs=1e-6)


def test_send_without_its_receive_is_unmatched(tmp_path):
    """Rank 0 sends three times to rank 1, whose trace holds two receives (its profiler stopped early)."""
    for r, n in ((0, 3), (1, 2)):
        b = TraceBuilder(rank=r, world_size=2)
        b.step(1, 0, 10_000)
        for i in range(n):
            b.nccl("send" if r == 0 else "recv", 1000 + 2000 * i + 100 * r, 300 - 100 * r, stream=40,
                   launch_at=10 + i, name="ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", pg_ranks=[0, 1])
            b.events[-1]["args"]["Dst Rank" if r == 0 else "Src Rank"] = 1 - r
        b.kernel("void gemm_kernel<float>()", 100, 500, launch_at=5)
        b.write(tmp_path / f"rank{r}.json")
    (x,) = analyze_path(str(tmp_path), jobs=1).skew.p2p
    assert (x.src, x.dst, x.matched, x.unmatched) == (0, 1, 2, 1)
    assert (x.sender_waits, x.receiver_waits) == (2, 0)  # each receive posted 0.1 ms after its send
    assert x.mean_wait_ms == pytest.approx(0.1) and x.mean_transfer_ms == pytest.approx(0.2)


@pytest.mark.parametrize("late_start", [True, False])
def test_pairs_of_different_sizes_are_reported(tmp_path, late_start):
    """Without Seq, rank 1's trace starting one all-reduce later is matched by completion time: the pairs are
    the same collectives and their element counts agree (nothing to report). Where the matched ranks really
    disagree on the message (rank 1 sends twice the elements), the analysis says so."""
    for r in range(2):
        b = TraceBuilder(rank=r, world_size=2)
        b.step(1, 0, 50_000)
        for n in range(1 if r and late_start else 0, 4):
            nelems = 1024 * (n + 1) * (1 if late_start or r == 0 else 2)
            b.nccl("allreduce", 1000 + n * 10_000, 500, launch_at=10 + n, nelems=nelems, group_size=2,
                   pg_ranks=[0, 1])
        b.write(tmp_path / f"rank{r}.json")
    a = analyze_path(str(tmp_path), jobs=1)
    if late_start:
        assert a.skew.size_mismatches == 0 and a.skew.matched == 3
        assert not any("disagree" in i.message for i in a.issues)
    else:
        assert a.skew.size_mismatches == 4
        assert any("4 of 4 matched collectives disagree" in i.message for i in a.issues)


def test_torchrec_sizes_are_consistent(tmp_path):
    _torchrec(tmp_path, steps=1)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.skew.size_mismatches == 0  # all_to_all: elements sent over all ranks = elements received


def test_one_pairing_of_sends_and_receives():
    """ordered_pairs (the pairing match_p2p, the Kineto replay and the peer recovery share): per (group, sender,
    receiver) the sends of the sender and the receives of the receiver, each in its rank's order, keys sorted."""
    from llmdiag.diagnose.metrics.job.pipeline.p2p import match_p2p, on_clock, ordered_pairs

    records = {1: [("pp", "recv", 0, 10, 30), ("pp", "send", 0, 40, 45), ("pp", "recv", 0, 50, 70)],
               0: [("pp", "send", 1, 5, 8), ("pp", "recv", 1, 41, 60), ("pp", "send", 1, 20, 22)]}
    pairs = ordered_pairs(on_clock(records, {0: 0, 1: 100}))
    assert list(pairs) == [("pp", 0, 1), ("pp", 1, 0)]
    assert pairs[("pp", 0, 1)] == ([(5, 8), (20, 22)], [(110, 130), (150, 170)])
    assert pairs[("pp", 1, 0)] == ([(140, 145)], [(41, 60)])
    m = {(x.src, x.dst): x for x in match_p2p(records, {0: 0, 1: 100})}
    # 0→1: posts 5 vs 110 and 20 vs 150: the receiver posted late both times; transfer = recv end − later post
    assert m[(0, 1)].matched == 2 and m[(0, 1)].sender_waits == 2 and m[(0, 1)].receiver_waits == 0
    assert m[(0, 1)].mean_wait_ms == pytest.approx((105 + 130) / 2 / 1e6)
    assert m[(0, 1)].mean_transfer_ms == pytest.approx((20 + 20) / 2 / 1e6)
    assert m[(1, 0)].receiver_waits == 1
