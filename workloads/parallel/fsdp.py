"""Sharded data parallelism with FSDP2 (`fully_shard`): per block, then the root, as torchtitan does.

Each block is its own all-gather / reduce-scatter group so communication of block i+1 overlaps compute of
block i. `reshard_after_forward=True` frees the gathered weights after forward (gathers them again in
backward: less memory, more traffic); under pipeline parallelism it defaults to False, since every
microbatch would otherwise re-gather. On a 2D (dp, fsdp) mesh this is HSDP: shard within, replicate across.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def mixed_precision(dtype: torch.dtype) -> MixedPrecisionPolicy | None:
    """bf16 compute with fp32 master weights and fp32 gradient reduction on GPU; None (plain fp32) on CPU."""
    if dtype == torch.float32:
        return None
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def apply_fsdp(module: nn.Module, mesh: DeviceMesh, reshard_after_forward: bool,
               mp_policy: MixedPrecisionPolicy | None = None, ignored: set | None = None) -> nn.Module:
    """`ignored`: parameters FSDP must leave alone (experts under EP, reduced by workloads.parallel.ep)."""
    kw = {"mp_policy": mp_policy} if mp_policy is not None else {}
    if ignored:
        kw["ignored_params"] = ignored
    for layer in module.layers.values():
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, **kw)
    # The root group (embedding, final norm, head) is needed right at the end of backward: no point resharding.
    fully_shard(module, mesh=mesh, reshard_after_forward=False, **kw)
    return module
