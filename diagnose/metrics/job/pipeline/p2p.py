"""Send/recv matched to its peer across ranks: wait versus transfer of point-to-point traffic.

A send from rank a to rank b in a group and a receive on b from a are matched in order: NCCL delivers the
messages of one ordered pair in order, so the n-th send a→b is the n-th receive on b from a (each rank's
records: rank/pipeline/p2p.py). Per pair: wait = the later post − the earlier (one side waited for the other:
a send posted first means the receiver was late), transfer = the receive's end − the later post."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.metrics.rank.pipeline.p2p import Record

if TYPE_CHECKING:
    from llmdiag.diagnose.model.matching import P2PMatch


Pair = tuple[str, int, int]  # (group, sender, receiver)
T = TypeVar("T")


def ordered_pairs(ops: Iterable[tuple[str, str, int, int, T]]) -> dict[Pair, tuple[list[T], list[T]]]:
    """(group, send|recv, rank, peer, x) for each op, in each rank's order -> per (group, sender, receiver), by
    key: the x of its sends and of its receives, in order. The one pairing of point-to-point traffic: NCCL
    delivers one ordered pair's messages in order, so the n-th send of a list is the n-th receive's."""
    out: dict[Pair, tuple[list[T], list[T]]] = {}
    for pg, kind, rank, peer, x in ops:
        send = kind == "send"
        key = (pg, rank, peer) if send else (pg, peer, rank)
        pair = out.get(key) or out.setdefault(key, ([], []))
        pair[0 if send else 1].append(x)
    return dict(sorted(out.items()))


def on_clock(records: dict[int, list[Record]], shift_ns: dict[int, int]) -> Iterator[tuple[str, str, int, int,
                                                                                             tuple[int, int]]]:
    """Each rank's records as `ordered_pairs` takes them, (start, end) on the common clock (`shift_ns` per rank)."""
    for r, recs in records.items():
        sh = shift_ns.get(r, 0)
        for pg, kind, peer, s, e in recs:
            yield pg, kind, r, peer, (s + sh, e + sh)


def match_p2p(records: dict[int, list[Record]], shift_ns: dict[int, int]) -> list[P2PMatch]:
    """One P2PMatch per (group, sender, receiver), times on the common clock (`shift_ns` per rank)."""
    if not records:  # no send/recv anywhere (most traces): the matching types are not even imported
        return []
    from llmdiag.diagnose.model.matching import P2PMatch

    out = []
    for (pg, src, dst), (a, b) in ordered_pairs(on_clock(records, shift_ns)).items():
        if src not in records or dst not in records or src < 0 or dst < 0:
            continue  # the other side has no trace: nothing to match against
        n = min(len(a), len(b))
        if n == 0:
            out.append(P2PMatch(pg, src, dst, 0, len(a) + len(b), 0.0, 0.0, 0, 0))
            continue
        sp = np.array([x[0] for x in a[:n]], np.int64)
        rp = np.array([x[0] for x in b[:n]], np.int64)
        re = np.array([x[1] for x in b[:n]], np.int64)
        later = np.maximum(sp, rp)
        out.append(P2PMatch(
            pg=pg, src=src, dst=dst, matched=n, unmatched=abs(len(a) - len(b)),
            mean_transfer_ms=float(np.maximum(re - later, 0).mean()) / NS_PER_MS,
            mean_wait_ms=float(np.abs(sp - rp).mean()) / NS_PER_MS,
            sender_waits=int((sp < rp).sum()), receiver_waits=int((rp < sp).sum())))
    return out
