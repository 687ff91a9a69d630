"""Send/recv matched to its peer across ranks: wait versus transfer of point-to-point traffic.

A send from rank a to rank b in a group and a receive on b from a are matched in order: NCCL delivers the
messages of one ordered pair in order, so the n-th send a→b is the n-th receive on b from a. Peers come
from Kineto's `Dst Rank` / `Src Rank`. Per pair: wait = the later post − the earlier (one side waited for the
other: a send posted first means the receiver was late), transfer = the receive's end − the later post.

Batched p2p (`batch_isend_irecv`, Megatron-core's default): the send/recv host ops of a batch launch nothing; the
`nccl:coalesced` op that closes it launches one `ncclDevKernel_SendRecv` for all of them (batch.py links them).
Each op it carries is a record with the kernel's span: the batch is posted and completes as one.
Where no op names its peer (torch before `Src Rank`/`Dst Rank`), peers.py tells them from the group's rank list.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from diagnose.io.trace import COMM, RankTrace
from diagnose.metrics.classify import collective_kind
from diagnose.metrics.overlap import in_windows
from diagnose.metrics.pipeline.batch import P2POp, batch_ops, group_label, peer_of, ranks_of, size_of
from diagnose.metrics.pipeline.peers import resolve_peers
from diagnose.metrics.steps import Window
from diagnose.model.format import NS_PER_MS
from diagnose.model.matching import P2PMatch

Record = tuple[str, str, int, int, int]  # (group, send|recv, peer, start ns, end ns)


def p2p_records(t: RankTrace, wins: list[Window]) -> tuple[list[Record], str]:
    """This rank's device send/recv inside the analysis windows, in start order, each with its peer; and why
    peers could not be told ("" when every record has one). Records whose peer is unknown are left out."""
    ops, why = p2p_ops(t, wins)
    return [(o.pg, o.kind, o.peer, o.start, o.end) for o in ops if o.peer is not None], why


def p2p_ops(t: RankTrace, wins: list[Window]) -> tuple[list[P2POp], str]:
    """Every send/recv of the rank inside the windows in start order, with its peer where one can be told (those
    that name none are left to the cross-rank matching of timematch.py), and why some could not ("" if none)."""
    inside = in_windows(t, (t.kind == COMM) & (t.stream >= 0), wins)
    ops: list[P2POp] = []
    kinds: dict[tuple, str] = {}  # (name id, collective name) -> kind: a trace has few distinct ones
    batched = []
    for i, a in t.comm_args.items():
        if not inside[i]:
            continue
        memo = (int(t.name[i]), str(a.get("Collective name", "")))
        kind = kinds.get(memo)
        if kind is None:
            kind = kinds[memo] = collective_kind(t.names[t.name[i]], a)
        if kind == "sendrecv":
            batched.append(i)
        elif kind in ("send", "recv"):
            ops.append(P2POp(kind, peer_of(a, kind), group_label(a), ranks_of(a), int(t.ts[i]), int(t.ts[i] + t.dur[i]),
                             int(t.stream[i]), False, size_of(a)))
    ops += batch_ops(t, batched)
    ops, why = resolve_peers(ops, t.rank, t.distributed)
    return sorted(ops, key=lambda o: (o.start, o.end)), why


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
