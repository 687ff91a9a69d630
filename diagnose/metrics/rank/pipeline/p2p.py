"""One rank's send/recv records with their peers, for matching across ranks (job/pipeline/p2p.py).

Peers come from Kineto's `Dst Rank` / `Src Rank`. Batched p2p (`batch_isend_irecv`, Megatron-core's default):
the send/recv host ops of a batch launch nothing; the `nccl:coalesced` op that closes it launches one
`ncclDevKernel_SendRecv` for all of them (batch.py links them). Each op it carries is a record with the
kernel's span: the batch is posted and completes as one. Where no op names its peer (torch before
`Src Rank`/`Dst Rank`), peers.py tells them from the group's rank list."""

from __future__ import annotations



from llmdiag.diagnose.io.trace import COMM, RankTrace
from llmdiag.diagnose.metrics.rank.classify import collective_kind
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.pipeline.batch import P2POp, batch_ops, group_label, peer_of, ranks_of, size_of
from llmdiag.diagnose.metrics.rank.pipeline.peers import resolve_peers
from llmdiag.diagnose.metrics.rank.steps import Window

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


