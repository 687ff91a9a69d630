"""Send/recv matched to its peer across ranks: wait versus transfer of point-to-point traffic.

A send from rank a to rank b in a group and a receive on b from a are matched in order: NCCL delivers the
messages of one ordered pair in order, so the n-th send a→b is the n-th receive on b from a (each rank's
records: rank/pipeline/p2p.py). Per pair: wait = the later post − the earlier (one side waited for the other:
a send posted first means the receiver was late), transfer = the receive's end − the later post."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.matching import P2PMatch
from llmdiag.diagnose.metrics.rank.pipeline.p2p import Record


def match_p2p(records: dict[int, list[Record]], shift_ns: dict[int, int]) -> list[P2PMatch]:
    """One P2PMatch per (group, sender, receiver), times on the common clock (`shift_ns` per rank)."""
    sends: dict[tuple, list] = defaultdict(list)
    recvs: dict[tuple, list] = defaultdict(list)
    for r, recs in records.items():
        sh = shift_ns.get(r, 0)
        for pg, kind, peer, s, e in recs:
            if kind == "send":
                sends[(pg, r, peer)].append((s + sh, e + sh))
            else:
                recvs[(pg, peer, r)].append((s + sh, e + sh))
    out = []
    for key in sorted(set(sends) | set(recvs), key=lambda k: (k[0], k[1], k[2])):
        pg, src, dst = key
        if src not in records or dst not in records or src < 0 or dst < 0:
            continue  # the other side has no trace: nothing to match against
        a, b = sends.get(key, []), recvs.get(key, [])
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
