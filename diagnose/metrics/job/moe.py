"""Expert parallelism across ranks: token imbalance per MoE layer and the rank-by-rank send matrix.

The n-th dispatch of a step on every rank of an EP group is the same MoE layer (each rank's ops: rank/moe.py);
rows received per rank give the imbalance max/mean per layer and step and over the whole step, and the
rank-by-rank send matrix. A rank that sends `s` rows to peer j is read from its own split list."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from llmdiag.diagnose.metrics.rank.moe import RankMoe

if TYPE_CHECKING:
    from llmdiag.diagnose.model.moe import MoeSummary


def moe_summary(per_rank: dict[int, RankMoe], hosts: dict[int, str]) -> MoeSummary | None:
    """Match the ranks' dispatches into layers; None when no rank did expert parallelism."""
    if not per_rank:
        return None
    from llmdiag.diagnose.model.moe import MoeLayer, MoeRank, MoeSummary  # imported where there is MoE

    labelled = any(r.labelled for r in per_rank.values())
    counted = "dispatch"
    # (group, step, ordinal) -> {rank: received rows}
    layers: dict[tuple, dict[int, int]] = defaultdict(dict)
    sent = defaultdict(int)
    recv = defaultdict(int)
    pair = defaultdict(int)
    groups: set[tuple[int, ...]] = set()
    for rank, rm in per_rank.items():
        seen = defaultdict(int)
        for op in rm.ops:
            if op.role != counted:
                continue
            group = tuple(op.group) if op.group else tuple(range(len(op.sent)))
            groups.add(group)
            key = (group, op.step, seen[(group, op.step)])
            seen[(group, op.step)] += 1
            layers[key][rank] = sum(op.received)
            sent[rank] += sum(op.sent) / rm.nsteps
            recv[rank] += sum(op.received) / rm.nsteps
            for peer, rows in zip(group, op.sent):
                pair[(rank, peer)] += rows / rm.nsteps
    out_layers = []
    for (group, step, ordinal), got in sorted(layers.items()):
        if set(got) != set(group):
            continue  # a rank of the group is missing: no cross-rank figure for this layer
        vals = [got[r] for r in group]
        mean = sum(vals) / len(vals)
        out_layers.append(MoeLayer(step, ordinal, list(group), vals, max(vals) / mean if mean else 1.0))
    ranks = []
    for rank, rm in sorted(per_rank.items()):
        ranks.append(MoeRank(rank, int(round(sent[rank])), int(round(recv[rank])), rm.dispatch_ms, rm.combine_ms,
                             rm.a2a_ms, rm.a2a_exposed_ms, rm.expert_ms, rm.step_ms))
    s = MoeSummary(source="split sizes" if layers else "kernels", role_source="labels" if labelled else "order",
                   groups=[list(g) for g in sorted(groups)], ranks=ranks, layers=out_layers)
    if layers:
        order = sorted({r for g in groups for r in g} | set(per_rank))
        s.matrix_ranks = order
        s.send_matrix = [[int(round(pair.get((a, b), 0))) for b in order] for a in order]
        s.imbalance, s.hot_rank = _worst(groups, recv)
        s.worst_layer_imbalance = max((x.imbalance for x in out_layers), default=None)
    busy = {r.rank: r.expert_ms for r in ranks if r.expert_ms > 0}
    if len(busy) > 1:
        mean = sum(busy.values()) / len(busy)
        s.slow_expert_rank = max(busy, key=lambda r: (busy[r], -r))
        s.expert_imbalance = busy[s.slow_expert_rank] / mean
    with_step = [r for r in ranks if r.step_ms > 0]
    if with_step:
        s.dispatch_combine_frac = sum((r.dispatch_ms + r.combine_ms) / r.step_ms for r in with_step) / len(with_step)
        s.a2a_exposed_frac = sum(r.a2a_exposed_ms / r.step_ms for r in with_step) / len(with_step)
    all_groups = groups or {tuple(sorted(per_rank))}
    s.cross_node_groups = sum(1 for g in all_groups if len({hosts.get(r, "") for r in g if hosts.get(r)}) > 1)
    return s



def _worst(groups, recv) -> tuple[float | None, int | None]:
    best: tuple[float, int] | None = None
    for g in groups:
        vals = {r: recv.get(r, 0.0) for r in g}
        mean = sum(vals.values()) / len(vals)
        if mean <= 0:
            continue
        hot = max(vals, key=lambda r: (vals[r], -r))
        cand = (vals[hot] / mean, hot)
        if best is None or cand[0] > best[0]:
            best = cand
    return best if best else (None, None)
