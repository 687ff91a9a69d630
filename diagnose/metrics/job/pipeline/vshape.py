"""V-shaped placement (DualPipeV, ZBV) from the transfers that link compute blocks: rank i of p holds stages i and
2p−1−i, so a microbatch's forward runs down the ranks (stage i on rank i) and back up (stage 2p−1−i on rank i),
turning on rank p−1 with nothing moved between its two stages.

The direction of a transfer gives the chunk of the block at either end: a forward fed from the rank before or
sent to the rank after is on the first chunk (stage i), one fed from the rank after or sent to the rank before is
on the second (stage 2p−1−i); backward the other way round. Its ordinal among the transfers of its pair and kind
gives the microbatch (NCCL pairs a pair's ops in order and a stage runs its microbatches in order).

Where two actions run back to back with nothing moved between them (the V's turn, a forward of one chunk right
after one of the other, an input-gradient action and its W), their kernels form one block: such a block is one
span, labelled by the transfer that leaves it (its last action), else by the one that feeds it. Busy time and
the bubble are exact either way; the labels of the run's first action are not told. Backward blocks no transfer
touches are W actions, shown on the rank's first stage with no microbatch (a W moves nothing: which stage and
microbatch it belongs to is not told); forward blocks no transfer touches are outside the schedule (data
loading, the optimizer step). A backward block with a transfer is labelled B: whether it was a full backward or
only its input-gradient half (I, with a W later) is not told either, DualPipeV mixing both.

Read only when every step shows the V's signature: the ranks' peers form a chain (no wrap from the last rank to
the first), and every pair of neighbours moves m forwards and m backwards each way per step.
"""

from __future__ import annotations

from dataclasses import replace

from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.metrics.job.pipeline.links import link

V_NAME = "v-shaped"  # ZBV and DualPipeV place and move alike: the transfers do not tell them apart
V_NOTE = ("Inferred from send/recv (no PP: labels): V-shaped placement (rank i holds stages i and 2p−1−i), each "
          "block's stage from the direction of the transfer that leaves or feeds it and its microbatch from that "
          "transfer's order; two actions with nothing moved between them (the V's turn, an I and its W) are one "
          "span; backward work no transfer touches is W, its stage and microbatch not told. The bubble is per rank: "
          "its two stages share the device. ")


def chain_order(p2p: dict[int, list[tuple]], ranks: list[int]) -> tuple[list[int], str]:
    """The ranks in V order (the rank holding stages 0 and 2p−1 first), or ([], why)."""
    peers = {r: {x[2] for x in p2p.get(r, []) if x[2] != r} for r in ranks}
    ends = [r for r in ranks if len(peers[r]) == 1]
    if len(ends) != 2 or any(len(peers[r]) not in (1, 2) for r in ranks):
        return [], ("the ranks' send/recv peers form no chain with two ends (a V-shaped schedule moves data only "
                    "between neighbouring ranks and never from the last rank to the first)")
    first = [r for r in ends if min(p2p[r], key=lambda x: (x[3], x[4]))[1] == "send"]
    if len(first) != 1:
        return [], (f"{len(first)} ends of the chain start their step with a send (the rank holding stage 0 of a "
                    "V-shaped schedule does, the one at the turn receives first)")
    order = [first[0]]
    while len(order) < len(ranks):
        nxt = [q for q in peers[order[-1]] if q not in order]
        if len(nxt) != 1:
            return [], "the ranks' send/recv peers form no single chain"
        order.append(nxt[0])
    return order, ""


def place_v(acts: dict[int, list[Action]], p2p: dict[int, list[tuple]], order: list[int]
            ) -> tuple[dict[int, list[Action]], int, str]:
    """(rank -> placed actions, microbatches, why not) for context-labelled blocks and transfers on one clock."""
    out: dict[int, list[Action]] = {r: [] for r in acts}
    ms = set()
    for step in sorted({a.step for v in acts.values() for a in v}):
        blocks = {r: sorted((a for a in v if a.step == step), key=lambda a: a.start) for r, v in acts.items()}
        placed, m, why = _place_step(blocks, p2p, order)
        if why:
            return {}, 0, f"step {step}: {why}"
        ms.add(m)
        for r, v in placed.items():
            out[r] += v
    if len(ms) != 1:
        return {}, 0, f"the steps move different numbers of microbatches ({sorted(ms)})"
    return out, ms.pop(), ""


def _place_step(blocks: dict[int, list[Action]], p2p: dict[int, list[tuple]], order: list[int]):
    p = len(order)
    pos = {r: i for i, r in enumerate(order)}
    nxt, prv, nth = link(blocks, p2p)
    moved: dict[tuple, int] = {}
    for (src, a), (dst, _) in nxt.items():
        key = (pos[src], pos[dst], blocks[src][a].kind)
        moved[key] = moved.get(key, 0) + 1
    edges = [(i, i + d, k) for i in range(p) for d in (-1, 1) for k in ("F", "B") if 0 <= i + d < p]
    counts = {moved.get(e, 0) for e in edges}
    if len(counts) != 1 or set(moved) - set(edges) or not counts.pop():
        return {}, 0, ("transfers between neighbours are not m forwards and m backwards each way "
                       f"({ {f'{a}->{b} {k}': n for (a, b, k), n in sorted(moved.items())} }): not a V-shaped "
                       "schedule")
    m = moved[edges[0]]

    def chunk_stage(r: int, kind: str, other: int, fed: bool) -> int:
        """Stage of a block on rank r of `kind` fed by (or feeding) rank `other`."""
        down = pos[other] > pos[r]  # the other rank is further down the V's first leg
        first = (down != fed) if kind == "F" else (down == fed)
        return pos[r] if first else 2 * p - 1 - pos[r]

    label: dict[tuple, tuple[int, str, int]] = {}
    for r, bl in blocks.items():
        for i, a in enumerate(bl):
            k = (r, i)
            if k in nxt:  # the transfer leaving it: its last action
                label[k] = (chunk_stage(r, a.kind, nxt[k][0], False), a.kind, nth[(r, i, "out")])
            elif k in prv:
                label[k] = (chunk_stage(r, a.kind, prv[k][0], True), a.kind, nth[(r, i, "in")])
    placed: dict[int, list[Action]] = {r: [] for r in blocks}
    for r, bl in blocks.items():
        for i, a in enumerate(bl):
            if (r, i) in label:
                s, kind, mb = label[(r, i)]
                placed[r].append(replace(a, stage=s, kind=kind, microbatch=mb))
            elif a.kind == "B":  # a W: it moves nothing, so neither its stage nor its microbatch is told
                placed[r].append(replace(a, stage=pos[r], kind="W", microbatch=-1))
            # a forward no transfer touches is outside the schedule
    for r in placed:
        placed[r].sort(key=lambda a: a.start)
        if not any(a.stage == pos[r] for a in placed[r]):
            return {}, 0, f"rank {r} shows no action of its first stage {pos[r]}"
    return placed, m, ""
