"""Replicated data parallelism: DDP with gradient buckets, or FSDP2-style `replicate` when TP is present.

Plain `DistributedDataParallel` is what most people run, and its `bucket_cap_mb` decides how gradient
all-reduces overlap with backward, so it is used whenever it can be. It cannot wrap DTensor parameters
(torch 2.13: `aten.cat.default: got mixed torch.Tensor and DTensor`), so with TP the module is replicated with
`torch.distributed._composable.replicate_with_fsdp.replicate` instead: FSDP2's machinery with a
replicate-only mesh, one all-reduce per block, composed per block then at the root like `fully_shard`.
The same holds for the zero-bubble pipeline schedules (zbv, dualpipev): they split backward into input and
weight halves, which DDP's reducer rejects (`rebuilt parameter indices size is not same as original model
parameters size`), while the pipeline stage drives FSDP2-style modules' gradient sync itself.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel


def apply_ddp(module: nn.Module, dp_mesh: DeviceMesh, device: torch.device, bucket_cap_mb: float,
              use_replicate: bool, mp_policy=None, ignored: set | None = None) -> nn.Module:
    """`ignored`: parameters reduced elsewhere (experts under EP: workloads.parallel.ep)."""
    if use_replicate:
        from torch.distributed._composable.replicate_with_fsdp import replicate

        kw = {"mp_policy": mp_policy} if mp_policy is not None else {}
        if ignored:
            kw["ignored_params"] = ignored
        for layer in module.layers.values():
            replicate(layer, mesh=dp_mesh, **kw)
        replicate(module, mesh=dp_mesh, **kw)
        return module
    if ignored:
        names = [n for n, p in module.named_parameters() if p in ignored]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, names)
    return DistributedDataParallel(
        module,
        process_group=dp_mesh.get_group(),
        bucket_cap_mb=bucket_cap_mb,
        device_ids=[device.index] if device.type == "cuda" else None,
    )
