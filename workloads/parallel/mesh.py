"""One DeviceMesh for the whole job, with named dims in torchtitan's order (pp, dp, fsdp, cp, tp).

Only dims of size > 1 exist, so a trace's `distributedInfo.pg_config` names exactly the groups that carry
traffic (`mesh_tp`, `mesh_pp`, ...). The flattened data-parallel dims that FSDP/DDP need (`fsdp_cp`,
`dp_cp`) are created here, up front and in the same order on every rank, so that every group exists
before the profiler starts and appears in the trace's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from llmdiag.workloads.grammar import Layout


def init_distributed(device: torch.device, timeout_s: float = 1800.0) -> None:
    """gloo on CPU, NCCL on CUDA (bound to this rank's GPU so NCCL connects eagerly)."""
    if dist.is_initialized():
        return
    if device.type == "cuda":
        dist.init_process_group("nccl", device_id=device, timeout=timedelta(seconds=timeout_s))
    else:
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))


@dataclass
class Mesh:
    layout: Layout
    world: DeviceMesh | None  # None for a single process
    ep_group: dist.ProcessGroup | None = None  # expert parallel (workloads.parallel.ep)
    edp_group: dist.ProcessGroup | None = None  # ranks holding the same experts

    def has(self, dim: str) -> bool:
        return getattr(self.layout, dim) > 1

    def __getitem__(self, dim: str) -> DeviceMesh:
        return self.world[dim]

    def group(self, dim: str) -> dist.ProcessGroup:
        return self.world[dim].get_group()

    def data_parallel(self) -> tuple[str, DeviceMesh | None]:
        """How gradients are reduced over dp x fsdp x cp, and on which mesh.

        `fsdp`: shard over fsdp (x cp); `hsdp`: replicate over dp, shard over fsdp (x cp), a 2D mesh;
        `ddp`: replicate over dp (x cp); `none`: nothing to reduce.
        """
        lay = self.layout
        if lay.fsdp > 1:
            shard = "fsdp_cp" if lay.cp > 1 else "fsdp"
            if lay.dp > 1:
                return "hsdp", self.world[("dp", shard)]
            return "fsdp", self.world[shard]
        if lay.dp > 1 or lay.cp > 1:
            name = "dp_cp" if (lay.dp > 1 and lay.cp > 1) else ("dp" if lay.dp > 1 else "cp")
            return "ddp", self.world[name]
        return "none", None


def build_mesh(layout: Layout, device: torch.device) -> Mesh:
    dims = layout.mesh_dims
    if not dims:
        return Mesh(layout, None)
    world = init_device_mesh(device.type, tuple(getattr(layout, d) for d in dims), mesh_dim_names=tuple(dims))
    if layout.fsdp > 1 and layout.cp > 1:
        world[("fsdp", "cp")]._flatten("fsdp_cp")
    elif layout.dp > 1 and layout.cp > 1:
        world[("dp", "cp")]._flatten("dp_cp")
    from llmdiag.workloads.parallel.ep import make_groups

    ep_group, edp_group = make_groups(layout, dist.get_rank())
    return Mesh(layout, world, ep_group, edp_group)
