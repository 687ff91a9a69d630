"""Virtual stages, W actions and V shapes, placed across ranks from the transfers that link compute blocks.

Input: each rank's compute blocks labelled F or B by launch context (infer.py: F outside autograd nodes, B
inside) and its send/recv with peers. A transfer is the n-th send a→b matched to the n-th receive on b from a;
its producer is the block on a that ended last before the send was posted, its consumer the first block of the
producer's kind on b that starts after the receive completed and no earlier transfer feeds. Following F transfers gives each microbatch's forward path through the
stages, B transfers its backward path:

- one path per microbatch through all n stages (the last rank hands back to the first): looped placement
  (interleaved 1F1B, looped zero-bubble), stage of a block = its place on the path, v = n / p;
- anything else is not placed: V-shaped placement (ZBV, DualPipeV) turns back on one rank, where its two stages
  run back to back with nothing moved between them, so kernels alone do not split them;
- backward blocks on no path are W actions, each of the oldest input-gradient action on its rank that has
  none yet (the schedules queue W behind its I); path blocks are then I, else full backward B.

The microbatch of a path is its rank among paths of its kind by first start: a stage runs its microbatches in
order, forward and backward.
Anything else (a block on two paths, paths of mixed lengths, a W with no I before it) is no layout and a reason.
"""

from __future__ import annotations

from dataclasses import replace

from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.metrics.job.pipeline.links import link
from llmdiag.diagnose.metrics.job.pipeline.vshape import V_NAME, chain_order, place_v


def place(acts: dict[int, list[Action]], p2p: dict[int, list[tuple]]) -> tuple[dict[int, list[Action]], str, str]:
    """(rank -> actions with stage, kind and microbatch; schedule name; why not) from context-labelled blocks and
    each rank's (pg, kind, peer, start, end) transfers, all on one clock."""
    out: dict[int, list[Action]] = {r: [] for r in acts}
    names = set()
    for step in sorted({a.step for v in acts.values() for a in v}):
        blocks = {r: sorted((a for a in v if a.step == step), key=lambda a: a.start) for r, v in acts.items()}
        placed, name, why = _place_step(blocks, p2p)
        if why:
            return {}, "", f"step {step}: {why}"
        names.add(name)
        for r, v in placed.items():
            out[r] += v
    if len(names) != 1:
        return {}, "", "the steps read as different schedules"
    return out, names.pop(), ""


def _place_step(blocks: dict[int, list[Action]], p2p: dict[int, list[tuple]]):
    nxt, prv, _ = link(blocks, p2p)
    paths = {k: _paths(blocks, nxt, prv, k) for k in ("F", "B")}
    lens = {k: sorted({len(x) for x in v}) for k, v in paths.items()}
    p = len(blocks)
    if not paths["F"] or lens["F"] != lens["B"] or len(lens["F"]) != 1:
        return {}, "", (f"forward paths of {lens['F']} blocks and backward paths of {lens['B']}, not one length: "
                        "where two stages of one rank run back to back with nothing moved between them (the turn "
                        "of a V-shaped schedule: ZBV, DualPipeV) the kernels cannot be split into stages")
    n_path = lens["F"][0]
    if not (n_path > p and n_path % p == 0):  # looped: a path crosses every stage, the last rank hands back
        return {}, "", (f"paths of {n_path} blocks over {p} ranks: not looped stages (V-shaped placement, where "
                        "a path turns back on one rank, is not placed)")
    fwd, bwd = paths["F"], paths["B"]
    n = len(fwd[0])
    m = len(fwd)
    if len(bwd) != m or any(len(x) != n for x in bwd):
        return {}, "", f"{m} forward and {len(bwd)} backward paths"
    label: dict[tuple, tuple[int, str, int]] = {}
    for mb, path in enumerate(sorted(fwd, key=lambda x: blocks[x[0][0]][x[0][1]].start)):
        for s, k in enumerate(path):
            label[k] = (s, "F", mb)
    for mb, path in enumerate(sorted(bwd, key=lambda x: blocks[x[0][0]][x[0][1]].start)):
        for s, k in enumerate(path):  # a stage runs its microbatches in order, backward as forward
            label[k] = (n - 1 - s, "B", mb)
    has_w = False
    for r, bl in blocks.items():
        queue: list[tuple] = []
        for i, a in enumerate(bl):
            k = (r, i)
            if k in label:
                if label[k][1] == "B":
                    queue.append(k)
                continue
            if a.kind == "F":
                continue  # outside the schedule (data loading, the optimizer step)
            if not queue:
                return {}, "", f"a backward block on rank {r} on no path follows no input-gradient action"
            s, _, mb = label[queue.pop(0)]
            label[k] = (s, "W", mb)
            has_w = True
    placed = {r: [] for r in blocks}
    w_of = {(s, mb) for s, kk, mb in label.values() if kk == "W"}
    for (r, i), (s, kind, mb) in label.items():
        if kind == "B" and has_w and (s, mb) in w_of:
            kind = "I"
        placed[r].append(replace(blocks[r][i], stage=s, kind=kind, microbatch=mb))
    for r in placed:
        placed[r].sort(key=lambda a: a.start)
    v = n // p
    name = ("zb" if has_w else "interleaved1f1b") if v > 1 else "1f1b"
    return placed, name, ""


def _paths(blocks, nxt, prv, kind: str) -> list[list[tuple]]:
    """Maximal chains of transfer-linked blocks of one kind, from each block no transfer feeds."""
    out = []
    for r, bl in blocks.items():
        for i, a in enumerate(bl):
            k = (r, i)
            if a.kind != kind or k in prv or k not in nxt:
                continue
            path = [k]
            while path[-1] in nxt:
                path.append(nxt[path[-1]])
            out.append(path)
    return out


def virtual_layout(acts: dict[int, list[Action]], p2p: dict[int, list[tuple]], shift: dict[int, int]):
    """(rank -> placed actions, [ranks in stage order], schedule, stages per rank, why not) for ranks whose one-
    stage reading failed; `acts` already on the common clock, `p2p` shifted here by `shift` (ns per rank)."""
    ranks = sorted(r for r in acts if acts[r])
    linked = {r: {x[2] for x in p2p.get(r, [])} for r in ranks}
    seen, todo = {ranks[0]} if ranks else set(), ranks[:1]
    while todo:
        for q in linked.get(todo.pop(), ()):
            if q in linked and q not in seen:
                seen.add(q)
                todo.append(q)
    if set(ranks) != seen:
        return {}, [], "", 0, "several pipeline replicas (or ranks without transfers): virtual stages are placed in one"
    moved = {r: [(pg, k, peer, s + shift.get(r, 0), e + shift.get(r, 0)) for pg, k, peer, s, e in p2p.get(r, [])]
             for r in ranks}
    placed, name, why = place({r: acts[r] for r in ranks}, moved)
    if why:
        order, v_why = chain_order(moved, ranks)
        if not v_why:
            placed, _, v_why = place_v({r: acts[r] for r in ranks}, moved, order)
        if v_why:
            return {}, [], "", 0, f"{why}; nor as a V (each rank holding stages i and 2p−1−i): {v_why}"
        return placed, [order], V_NAME, 2, ""
    order = sorted(ranks, key=lambda r: min(a.stage for a in placed[r]))
    n = 1 + max(a.stage for v in placed.values() for a in v)
    return placed, [order], name, n // len(order), ""


VIRTUAL_NOTE = ("Inferred from send/recv (no PP: labels): virtual stages from the paths transfers make through the "
                "ranks, forward/backward from autograd nodes, W actions from backward work no transfer touches. ")
