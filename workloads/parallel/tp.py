"""Tensor parallelism (Megatron style) with DTensor's `parallelize_module`, optionally with sequence parallel.

Attention and MLP are split column-wise in (wq, wk, wv, w1, w3) and row-wise out (wo, w2), so each block
costs one all-reduce forward and one backward per sub-layer; with `--sp` the all-reduce becomes an
all-gather before and a reduce-scatter after, and the norms run on sequence shards. The plan is torchtitan's
Llama plan. It is applied piece by piece right after each piece is materialised, so a rank never holds more
than one unsharded piece; `src_data_rank=None` slices locally because every rank already has the same weights.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def _block_plan(sp: bool) -> dict:
    if not sp:
        return {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        }
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {
        "attention_norm": SequenceParallel(),
        "attention": gather,
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def apply_tp(name: str, piece: nn.Module, tp_mesh: DeviceMesh, sp: bool) -> None:
    """Shard one top-level piece of the model (`tok_embeddings`, `layers.<i>`, `norm`, `output`) in place."""
    seq = Shard(1) if sp else Replicate()
    if name == "tok_embeddings":
        plan = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    elif name.startswith("layers."):
        plan = _block_plan(sp)
        if not hasattr(piece.feed_forward, "w1"):  # MoE: router and experts stay whole (replicated over tp)
            plan = {k: v for k, v in plan.items() if not k.startswith("feed_forward")}
    elif name == "norm":
        if not sp:
            return  # replicated norm on replicated activations: nothing to shard
        plan = SequenceParallel()
    elif name == "output":
        plan = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    else:
        raise ValueError(f"no tensor-parallel plan for {name}")
    parallelize_module(piece, tp_mesh, plan, src_data_rank=None)
    _compact(piece)


def _compact(piece: nn.Module) -> None:
    """A dim-0 shard sliced locally is a view that keeps the whole unsharded weight alive: copy it out.

    Without this every rank would keep the full weights of its pieces, which the memory profile would report.
    """
    for module in piece.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if not isinstance(p, DTensor):
                continue
            local = p.to_local()
            if local.untyped_storage().nbytes() <= local.numel() * local.element_size():
                continue
            dt = DTensor.from_local(local.clone(), p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                    stride=p.stride())
            module.register_parameter(name, nn.Parameter(dt, requires_grad=p.requires_grad))
