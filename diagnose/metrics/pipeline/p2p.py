"""Send/recv matched to its peer across ranks: wait versus transfer of point-to-point traffic.

A send from rank a to rank b in a group and a receive on b from a are matched in order: NCCL delivers the
messages of one ordered pair in order, so the n-th send a→b is the n-th receive on b from a. Peers come
from Kineto's `Dst Rank` / `Src Rank`. Per pair: wait = the later post − the earlier (one side waited for the
other: a send posted first means the receiver was late), transfer = the receive's end − the later post.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from diagnose.io.trace import COMM, RankTrace
from diagnose.metrics.classify import collective_kind
from diagnose.metrics.overlap import in_windows, pg_label
from diagnose.metrics.steps import Window
from diagnose.model.format import NS_PER_MS
from diagnose.model.matching import P2PMatch

Record = tuple[str, str, int, int, int]  # (group, send|recv, peer, start ns, end ns)


def p2p_records(t: RankTrace, wins: list[Window]) -> list[Record]:
    """This rank's device send/recv with a known peer inside the analysis windows, in start order."""
    inside = in_windows(t, (t.kind == COMM) & (t.stream >= 0), wins)
    out = []
    kinds: dict[tuple, str] = {}  # (name id, collective name) -> kind: a trace has few distinct ones
    for i, a in t.comm_args.items():
        if not inside[i]:
            continue
        memo = (int(t.name[i]), str(a.get("Collective name", "")))
        kind = kinds.get(memo)
        if kind is None:
            kind = kinds[memo] = collective_kind(t.names[t.name[i]], a)
        if kind not in ("send", "recv"):
            continue
        try:
            peer = int(a.get("Dst Rank" if kind == "send" else "Src Rank"))
        except (TypeError, ValueError, OverflowError):  # untrusted: a float inf, a string
            continue
        pg = pg_label(a)
        if a.get("Process Group Ranks"):
            pg = f"{pg}{a['Process Group Ranks']}"
        out.append((pg, kind, peer, int(t.ts[i]), int(t.ts[i] + t.dur[i])))
    return sorted(out, key=lambda r: (r[3], r[4]))


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
        if src not in records or dst not in records:
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
