"""Transfers linking compute blocks across ranks: which block produced each send and which block the matching
receive fed. The looped placement (virtual.py) and the V-shaped one (vshape.py) both follow these links."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from llmdiag.diagnose.metrics.rank.pipeline.actions import Action


def link(blocks: dict[int, list[Action]], p2p: dict[int, list[tuple]]) -> tuple[dict, dict, dict]:
    """(producer -> consumer, consumer -> producer, block -> ordinal of its transfer among those of its pair and
    kind) over (rank, block index). A transfer is the n-th send a→b matched to the n-th receive on b from a; its
    producer the block on a that ended last before the send was posted, its consumer the first block of the
    producer's kind on b that starts after the receive completed and no earlier transfer feeds."""
    nxt: dict[tuple, tuple] = {}
    prv: dict[tuple, tuple] = {}
    nth: dict[tuple, int] = {}
    transfers = []
    ends = {r: [a.end for a in bl] for r, bl in blocks.items()}
    rising = {r: all(a <= b for a, b in zip(e, e[1:])) for r, e in ends.items()}
    for src, recs in p2p.items():
        for dst in {r[2] for r in recs if r[1] == "send"}:
            sends = [r for r in recs if r[1] == "send" and r[2] == dst]
            recvs = [r for r in p2p.get(dst, []) if r[1] == "recv" and r[2] == src]
            for s, r in zip(sends, recvs):
                a = _producer(ends[src], rising[src], s[3]) if src in ends else None
                if a is not None:
                    transfers.append((r[4], src, a, dst))
    starts = {r: [a.start for a in bl] for r, bl in blocks.items()}
    count: dict[tuple, int] = {}
    for t, src, a, dst in sorted(transfers):  # each feeds the first free block of its kind after it arrived
        kind = blocks[src][a].kind
        bl = blocks.get(dst, [])
        b = next((i for i in range(bisect_left(starts[dst], t), len(bl)) if bl[i].kind == kind
                  and (dst, i) not in prv), None)
        if b is None or (src, a) in nxt:
            continue  # a transfer of another step, or the producer already feeds one
        nxt[(src, a)], prv[(dst, b)] = (dst, b), (src, a)
        n = count[(src, dst, kind)] = count.get((src, dst, kind), -1) + 1
        nth[(src, a, "out")] = nth[(dst, b, "in")] = n
    return nxt, prv, nth


def _producer(ends: list[int], rising: bool, t: int) -> int | None:
    """The block that ended last at or before t: by bisection where the ends rise with the starts (one stream of
    blocks), else by a scan (blocks of two threads overlapping)."""
    if rising:
        i = bisect_right(ends, t) - 1
        return i if i >= 0 else None
    best = None
    for i, e in enumerate(ends):
        if e <= t and (best is None or e >= ends[best]):
            best = i
    return best
