"""Peers told across ranks (pipeline/timematch.py): a send and its receive overlap in time and move the same size;
a peer is taken only where the evidence leaves one, else unknown with the reason. Checked on hand-made ops whose
answer is by construction, and on generated traces against the same trace written with `Src/Dst Rank`."""

from __future__ import annotations

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.pipeline.batch import P2POp
from llmdiag.diagnose.metrics.job.pipeline.timematch import match
from tests.gen.pipeline_p2p import P2PCase, write


def op(kind, start, end, peer=None, ranks=(0, 1, 2), stream=1, batched=False, size="1024 BFloat16"):
    return P2POp(kind, peer, "pp", list(ranks), start, end, stream, batched, size)


def test_unique_overlap_tells_the_peer():
    """A chain 0 → 1 → 2: rank 1's receive overlaps only rank 0's send, its send only rank 2's receive."""
    ops = {0: [op("send", 0, 10)], 1: [op("recv", 5, 10, stream=2), op("send", 20, 30, stream=3)],
           2: [op("recv", 25, 30)]}
    peers, why = match(ops)
    assert why == ""
    assert peers == {(0, 0): 1, (1, 0): 0, (1, 1): 2, (2, 0): 1}


def test_size_tells_apart_what_time_does_not():
    """Rank 1's two receives overlap the sends of 0 and 2, but each moves the size of only one of them."""
    ops = {0: [op("send", 0, 10)], 1: [op("recv", 0, 10, stream=2), op("recv", 0, 10, stream=3, size="8 Float")],
           2: [op("send", 0, 10, size="8 Float")]}
    peers, why = match(ops)
    assert why == "" and peers[(1, 0)] == 0 and peers[(1, 1)] == 2


def test_two_candidates_stay_unknown():
    """Rank 1 receives twice while 0 and 2 both send, all overlapping: which came from where is not told."""
    ops = {0: [op("send", 0, 10, batched=True)], 2: [op("send", 0, 10, batched=True)],
           1: [op("recv", 0, 10, batched=True), op("recv", 0, 10, batched=True)]}
    peers, why = match(ops)
    assert peers == {} and "cannot be told" in why


def test_order_tells_what_overlap_alone_does_not():
    """Rank 0's two sends (peer told) overlap both of rank 1's receives; NCCL pairs them in order, so the first
    receive is the first send's and the second the second's, although each overlaps both."""
    ops = {0: [op("send", 0, 20, peer=1, ranks=(0, 1)), op("send", 5, 30, peer=1, ranks=(0, 1))],
           1: [op("recv", 10, 20, ranks=(0, 1)), op("recv", 15, 30, ranks=(0, 1))]}
    peers, why = match(ops)
    assert why == "" and peers[(1, 0)] == 0 and peers[(1, 1)] == 0


def test_a_rank_without_trace_leaves_peers_unknown():
    ops = {0: [op("send", 0, 10, ranks=(0, 1, 2, 3))], 1: [op("recv", 0, 10, ranks=(0, 1, 2, 3))]}
    peers, why = match(ops)
    assert peers == {} and "without send/recv in the traces" in why


def _pairs(folder):
    a = analyze_path(str(folder), jobs=1)
    return a, sorted((x.src, x.dst, x.matched) for x in (a.skew.p2p if a.skew else []))


def test_peerless_traces_read_as_those_with_peers(tmp_path):
    """1F1B, p = 4, batched p2p without Src/Dst Rank (middle stages' batches carry ops to both sides), and
    interleaved single ops (the ends' streams reach the other end): the peers the traces tell are those the same
    traces with Src/Dst Rank name, and so are the bubbles."""
    for c in (P2PCase(p=4, m=8, batched=True), P2PCase(p=4, m=8, batched=False, schedule="interleaved1f1b")):
        told, bare = tmp_path / f"{c.schedule}-told", tmp_path / f"{c.schedule}-bare"
        write(c, told)
        write(P2PCase(**{**c.__dict__, "peer_ranks": False}), bare)
        (a, want), (b, got) = _pairs(told), _pairs(bare)
        assert want and got == want
        assert b.pipeline is not None and a.pipeline is not None
        assert b.pipeline.explanation.startswith("Send/recv name no peer: peers told by matching")
        assert "peers told" not in a.pipeline.explanation
        assert [(x.rank, round(x.measured, 6)) for x in b.pipeline.stage_bubbles] == \
               [(x.rank, round(x.measured, 6)) for x in a.pipeline.stage_bubbles]
