"""Pipeline stages across ranks, for traces with no `PP:` labels: the chain of neighbours, and the schedule.

Each rank's worker inferred its actions and its send/recv neighbours (rank/pipeline/infer.py); the stage of a
rank is its place in the chain those neighbours form across ranks (`chains`), and the schedule's name is read
from the last stage's order of forwards and backwards (`schedule_of`). Where the links do not form chains,
no stages and a reason: unknown, not a guess."""

from __future__ import annotations



from llmdiag.diagnose.metrics.rank.pipeline.peers import NO_PEERS
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.metrics.rank.pipeline.infer import Links


def chains(links: dict[int, Links]) -> tuple[list[list[int]], str]:
    """Each pipeline replica's ranks in stage order, walked from its stage 0; ([], reason) if inconsistent."""
    ok = {r: lk for r, lk in links.items() if not lk.reason}
    bad = sorted((not lk.reason.startswith(NO_PEERS), r, lk.reason) for r, lk in links.items() if lk.reason)
    if bad:  # missing peers first: the other ranks' readings rest on peers guessed from the group's list
        return [], f"rank {bad[0][1]}: {bad[0][2]}"
    out, seen = [], set()
    for r in sorted(ok):
        if ok[r].prev is not None:
            continue
        chain = [r]
        while ok[chain[-1]].next is not None:
            n = ok[chain[-1]].next
            if n not in ok:
                return [], f"rank {n}, the next stage of rank {chain[-1]}, has no usable trace"
            if n in chain or ok[n].prev != chain[-1]:
                return [], f"rank {chain[-1]} sends forward to rank {n}, which does not receive from it first"
            chain.append(n)
        out.append(chain)
        seen.update(chain)
    if set(ok) - seen:
        return [], f"ranks {sorted(set(ok) - seen)} are on no chain from a stage 0"
    if len({len(c) for c in out}) > 1:
        return [], "pipeline replicas of different lengths"
    return out, ""



def schedule_of(actions_last_stage: list[Action]) -> str:
    """1f1b when the last stage runs a backward before its last forward of a step, else gpipe."""
    steps = sorted({a.step for a in actions_last_stage})
    if not steps:
        return "gpipe"
    order = [a.kind for a in sorted(actions_last_stage, key=lambda a: a.start) if a.step == steps[0]]
    return "gpipe" if order == sorted(order, key=lambda k: k != "F") else "1f1b"
