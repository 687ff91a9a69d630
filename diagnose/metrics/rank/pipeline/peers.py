"""Peers of send/recv ops that do not name them (torch builds before `Src Rank`/`Dst Rank` were recorded).

A pipeline group lists its ranks in stage order (DeviceMesh's `mesh_pp`, Megatron's pipeline group), so a rank's
neighbours are the ranks beside it in that list. Where that leaves one candidate (the first and last stage) every
op goes to it. A middle stage has two: single ops tell them apart by stream, since ProcessGroupNCCL gives each
peer pair its own communicator and stream, and a stage's first transfer of a step is the receive of microbatch
0's activation from the previous stage (its stream is the previous stage's). A batch (`nccl:coalesced`) runs on
the group's one stream and carries ops to both sides: nothing in one rank's trace tells them apart, and the
answer is unknown, with that reason. Never a guess.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from llmdiag.diagnose.metrics.rank.pipeline.batch import P2POp

NO_PEERS = "send/recv name no peer (no `Src Rank`/`Dst Rank`: a torch build from before they were recorded)"


def resolve_peers(ops: list[P2POp], rank: int | None, dist: dict) -> tuple[list[P2POp], str]:
    """`ops` with every peer that can be told filled in, and why the others could not ("" if none is left)."""
    todo = [o for o in ops if o.peer is None]
    if not todo:
        return ops, ""
    if rank is None:
        return ops, f"{NO_PEERS}, and the trace does not say its own rank"
    by_pg: dict[str, list[P2POp]] = defaultdict(list)
    for o in todo:
        by_pg[o.pg].append(o)
    fixed: dict[int, int] = {}  # id(op) -> peer
    listed: set[int] = set()  # ops whose peer is the one neighbour the list gives (a linear pipeline assumed)
    for pg, mine in by_pg.items():
        ranks = mine[0].ranks or _pg_ranks(pg, dist)
        if not ranks or rank not in ranks:
            return ops, f"{NO_PEERS}, and their group '{pg}' lists no ranks to take neighbours from"
        i = ranks.index(rank)
        near = [ranks[j] for j in (i - 1, i + 1) if 0 <= j < len(ranks)]
        streams = sorted({o.stream for o in mine})
        if len(near) == 1:
            if len(streams) > 1 and not any(o.batched for o in mine):
                return ops, (f"{NO_PEERS}; rank {rank} ends group '{pg}' (one neighbour) but its send/recv use "
                             f"{len(streams)} streams (one per peer): more peers than a linear pipeline gives it "
                             "(stages that wrap from the last rank to the first: interleaved)")
            fixed.update((id(o), near[0]) for o in mine)
            listed.update(id(o) for o in mine)
            continue
        if any(o.batched for o in mine):
            return ops, (f"{NO_PEERS}; batched (nccl:coalesced) on a middle stage of group '{pg}', each batch "
                         "carrying ops to both neighbours on one stream: which op goes where cannot be told")
        first = min(mine, key=lambda o: (o.start, o.end))
        if len(streams) != 2 or first.kind != "recv":
            why = (f"{len(streams)} stream(s)" if len(streams) != 2 else "its first transfer is a send")
            return ops, (f"{NO_PEERS}; on a middle stage of group '{pg}' the two neighbours cannot be told apart "
                         f"({why}; one stream per neighbour and a first receive from the previous stage expected)")
        prev, nxt = near
        fixed.update((id(o), prev if o.stream == first.stream else nxt) for o in mine)
    return [replace(o, peer=fixed[id(o)], listed=id(o) in listed) if id(o) in fixed else o for o in ops], ""


def _pg_ranks(pg: str, dist: dict) -> list[int] | None:
    """The group's ranks from distributedInfo.pg_config, matched by its description or name."""
    cfg = dist.get("pg_config") if isinstance(dist, dict) else None
    if isinstance(cfg, dict):
        cfg = list(cfg.values())
    for g in cfg if isinstance(cfg, list) else []:
        if isinstance(g, dict) and pg in (str(g.get("pg_desc", "")), str(g.get("pg_name", ""))):
            r = g.get("ranks")
            if isinstance(r, list) and all(isinstance(x, int) for x in r):
                return r
    return None
