"""Compose the parallelisms on one DeviceMesh, in torchtitan's order: TP -> activation checkpointing -> FSDP/DDP.

Pipeline parallelism decides which pieces a rank builds at all (its stages); context parallelism is a
property of attention (the ring) plus a share of the data-parallel gradient reduction.
"""

from __future__ import annotations

import torch
from torch import nn

from llmdiag.workloads import model as M
from llmdiag.workloads.options import RunPlan
from llmdiag.workloads.parallel.mesh import Mesh


def apply_ac(module: nn.Module) -> None:
    """Full activation checkpointing per block: recompute each block's forward during backward."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for key, layer in list(module.layers.items()):
        module.layers[key] = checkpoint_wrapper(layer, preserve_rng_state=False)


def build_local_modules(run: RunPlan, mesh: Mesh, rank: int, device: torch.device,
                        compute_dtype: torch.dtype) -> dict[int, nn.Module]:
    """The modules this rank trains, keyed by pipeline stage index ({0: whole model} without PP).

    Master weights are fp32 everywhere; on GPU the forward runs in bf16 (autocast, and FSDP's
    MixedPrecisionPolicy so that gathers move bf16).
    """
    from llmdiag.workloads.parallel import ep as EP
    from llmdiag.workloads.parallel.cp import apply_cp
    from llmdiag.workloads.parallel.dp import apply_ddp
    from llmdiag.workloads.parallel.fsdp import apply_fsdp, mixed_precision
    from llmdiag.workloads.parallel.tp import apply_tp

    plan, opts = run.plan, run.options
    cfg, pipe, lay = plan.model, plan.pipeline, plan.layout
    stage_ids = plan.stages_of(rank)
    dp_kind, dp_mesh = mesh.data_parallel()
    mp = mixed_precision(compute_dtype)
    experts = EP.local_experts(lay, rank, cfg.moe_experts)
    modules: dict[int, nn.Module] = {}
    for s in stage_ids:
        if pipe:
            module = M.build(cfg, pipe.layers_of(s), first=s == 0, last=s == pipe.stages - 1, expert_ids=experts)
        else:
            module = M.build(cfg, expert_ids=experts)
        for prefix, piece in module.pieces():
            M.materialize(piece, prefix, cfg, device, torch.float32, opts.seed)
            if lay.tp > 1:
                apply_tp(prefix, piece, mesh["tp"], plan.sp)
        EP.attach(module, mesh.ep_group, lay.ep)
        ignored = {p for _, p in EP.expert_params(module)}
        if lay.cp > 1:
            apply_cp(module, mesh.group("cp"))
        if opts.ac:
            apply_ac(module)
        if dp_kind in ("fsdp", "hsdp"):
            module = apply_fsdp(module, dp_mesh, run.reshard_after_forward, mp, ignored)
        elif dp_kind == "ddp":
            split_backward = pipe is not None and pipe.schedule in ("zbv", "dualpipev")
            module = apply_ddp(module, dp_mesh, device, opts.bucket_cap_mb, lay.tp > 1 or split_backward, mp,
                               ignored)
        modules[s] = module
    return modules
