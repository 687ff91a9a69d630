"""Point-to-point ops of one rank, single or batched, each with the device span that carries it.

A single op (`nccl:send`/`nccl:recv`, torch.distributed.pipelining's default) launches its own SendRecv kernel.
A batch (`torch.distributed.batch_isend_irecv`, Megatron-core's `_batched_p2p_ops`) does not: inside
ProcessGroupNCCL's coalescing each `c10d::send`/`c10d::recv_` only records its `record_param_comms` (kind, group,
size and, in newer torch, the peer), and `endCoalescing` opens `nccl:coalesced`, whose launch is the one
`ncclDevKernel_SendRecv` kernel of the whole batch. The ops a coalesced kernel carries are those recorded on its
launching thread after the previous coalesced launch and before its own, that launched nothing themselves.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.io.trace import RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank.classify import collective_kind
from llmdiag.diagnose.metrics.rank.overlap import pg_label


@dataclass
class P2POp:
    """One send or recv on this rank: its peer and group where known, and the device span that carries it."""

    kind: str  # send or recv
    peer: int | None  # global rank of the other side; None where the trace does not say
    pg: str  # group label as matching uses it
    ranks: list[int] | None  # the group's global ranks, where the args list them
    start: int  # ns: the device span that carries it (its own kernel, or its batch's)
    end: int
    stream: int
    batched: bool
    size: str = ""  # "nelems dtype" as the args give it: a send and its receive move the same tensor
    batch: int = -1  # the coalesced kernel that carries it (its event index); -1 for a single op
    listed: bool = False  # peer from the group's rank list (an end rank's one neighbour), not named by the op


def size_of(a: dict) -> str:
    """The tensor an op moves, as its args describe it ("" where they do not)."""
    n = [a.get(k) for k in ("In msg nelems", "Out msg nelems") if isinstance(a.get(k), int) and a.get(k) > 0]
    return f"{max(n)} {a.get('dtype', '')}" if n else ""


def peer_of(a: dict, kind: str) -> int | None:
    try:
        return int(a.get("Dst Rank" if kind == "send" else "Src Rank"))
    except (TypeError, ValueError, OverflowError):  # absent (older torch) or untrusted: a float inf, a string
        return None


def ranks_of(a: dict) -> list[int] | None:
    """`Process Group Ranks` as a list (Kineto writes a list or its text)."""
    v = a.get("Process Group Ranks")
    if isinstance(v, list):
        try:
            return [int(x) for x in v]
        except (TypeError, ValueError, OverflowError):
            return None
    if isinstance(v, str) and len(v) < 100_000:
        return [int(x) for x in re.findall(r"-?\d+", v)] or None
    return None


def batch_ops(t: RankTrace, kernels: list[int]) -> list[P2POp]:
    """The send/recv ops each coalesced SendRecv kernel (indices `kernels`) carries, with its span."""
    if not kernels:
        return []
    rt = np.flatnonzero((t.kind == RUNTIME) & (t.corr >= 0))
    launch_of = dict(zip(t.corr[rt].tolist(), rt.tolist()))
    host = []
    for i, a in t.comm_args.items():
        if t.stream[i] < 0 and a.get("Collective name") in ("send", "recv", "isend", "irecv"):
            host.append(i)
    if not host:
        return []
    host = np.array(sorted(host, key=lambda i: (int(t.thread[i]), int(t.ts[i]))), np.int64)
    launches = [(int(t.thread[launch_of[c]]), int(t.ts[launch_of[c]]), d)
                for d, c in ((d, int(t.corr[d])) for d in kernels) if c in launch_of]
    launched = _launching(t, host, rt)
    out: list[P2POp] = []
    prev: dict[int, int] = {}
    per_thread = {th: host[t.thread[host] == th] for th in {x[0] for x in launches}}  # each sorted by start
    for th, at, d in sorted(launches):
        h = per_thread[th]
        lo = int(np.searchsorted(t.ts[h], prev.get(th, -(1 << 62)), "right"))
        mine = h[lo:int(np.searchsorted(t.ts[h], at, "left"))]  # recorded since the previous launch: linear overall
        prev[th] = at
        s, e = int(t.ts[d]), int(t.ts[d] + t.dur[d])
        for i in mine.tolist():
            if launched[i]:
                continue
            a = t.comm_args[i]
            kind = collective_kind("record_param_comms", a).replace("isend", "send").replace("irecv", "recv")
            out.append(P2POp(kind, peer_of(a, kind), group_label(a), ranks_of(a), s, e, int(t.stream[d]), True,
                             size_of(a), int(d)))
    return out


def _launching(t: RankTrace, host: np.ndarray, rt: np.ndarray) -> dict[int, bool]:
    """Per host op: does a runtime call on its thread fall inside it (a single op launching its own kernel)?"""
    out = {}
    for th in np.unique(t.thread[host]).tolist():
        calls = np.sort(t.ts[rt[t.thread[rt] == th]])
        h = host[t.thread[host] == th]
        lo = np.searchsorted(calls, t.ts[h], "left")
        hi = np.searchsorted(calls, t.ts[h] + t.dur[h], "right")
        out.update(zip(h.tolist(), (hi > lo).tolist()))
    return out


def group_label(a: dict) -> str:
    """The group as matching keys it: its label and, where listed, its ranks."""
    pg = pg_label(a)
    return f"{pg}{a['Process Group Ranks']}" if a.get("Process Group Ranks") else pg
