"""Expert parallelism: each EP group shards the experts; gradients of experts are reduced by hand.

Groups (see Layout.ep_groups): an EP group is `ep` consecutive data-parallel replicas; the expert-data-parallel
(`edp`) group joins the ranks that hold the same experts in different EP groups. Both are created with
`new_group(group_desc="mesh_ep" / "mesh_edp")` on every rank in one fixed order, before the profiler starts, so
the trace's pg_config names them.

Dense parameters are averaged over dp x fsdp by DDP/FSDP as usual; expert parameters are excluded from those
wrappers (DDP's ignore list, FSDP2's `ignored_params`), because each rank holds different experts. The
gradient an expert receives already sums the contributions of every rank in its EP group (they come back
through the combine all-to-all), so `reduce_expert_grads` divides by dp x fsdp and sums over the edp group:
the same average the dense parameters get.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from llmdiag.workloads.grammar import Layout
from llmdiag.workloads.moe import is_expert_param, moe_modules


def local_experts(layout: Layout, rank: int, experts: int) -> list[int] | None:
    """Global ids of the experts this rank holds (None: all of them)."""
    if layout.ep == 1:
        return None
    per = experts // layout.ep
    e = layout.ep_coords(rank)[0]
    return list(range(e * per, (e + 1) * per))


def make_groups(layout: Layout, rank: int) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None]:
    """(EP group, edp group) of this rank; every rank creates every group, in the same order."""
    if layout.ep == 1:
        return None, None
    ep_groups, edp_groups = layout.ep_groups()
    mine = [None, None]
    for slot, groups, desc in ((0, ep_groups, "mesh_ep"), (1, edp_groups, "mesh_edp")):
        for ranks in groups:
            g = dist.new_group(ranks, group_desc=desc) if len(ranks) > 1 else None
            if rank in ranks:
                mine[slot] = g
    return mine[0], mine[1]


def attach(module: nn.Module, ep_group, ep_size: int) -> None:
    for m in moe_modules(module):
        m.ep_group, m.ep_size = ep_group, ep_size


def expert_params(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in module.named_parameters() if is_expert_param(n)]


@torch.no_grad()
def reduce_expert_grads(modules, dp_degree: int, edp_group) -> None:
    """Average expert gradients like DDP averages the dense ones (divide by dp x fsdp, sum over edp)."""
    params = [p for m in modules for _, p in expert_params(m)]
    if not params:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    if edp_group is not None:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=edp_group)
        for g, new in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
            g.copy_(new)
    if dp_degree > 1:
        torch._foreach_div_(grads, float(dp_degree))
