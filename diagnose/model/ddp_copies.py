"""DDP's gradient copies of one rank (metrics/rank/ddp_copies.py): without `gradient_as_bucket_view=True`,
DistributedDataParallel's reducer copies each gradient into its bucket during backward
(`torch::distributed::reducer::mul_out`, the copy fused with the 1/world-size scaling) and back out after the
bucket's all-reduce (`torch.distributed.ddp.reducer::copy_bucket_to_grad`, a name PyTorch records only when
gradients are not bucket views). Every time is a mean per step (ms) over the rank's analysis windows;
rules/ddp_copies.py reads it. A rank without `copy_bucket_to_grad` ops has no record (None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass  # its __init__ compiled once per user (model/code_cache.py)


@dataclass
class DdpCopies:
    back_ops: float = 0.0  # `copy_bucket_to_grad` ops per step (one per gradient)
    back_host_ms: float = 0.0  # host time per step inside them (their union)
    back_idle_ms: float = 0.0  # device idle per step inside them (no device op of any stream running)
    back_device_ms: float = 0.0  # device time per step of the copies launched inside them (by correlation id)
    back_copy: str = ""  # the most common of those device ops' names (`Memcpy DtoD (Device -> Device)`)
    into_ops: float = 0.0  # `reducer::mul_out` ops per step (the copy into the bucket)
    into_device_ms: float = 0.0  # device time per step of the kernels launched inside them
    ddp_forward: bool = False  # a `DistributedDataParallel.forward` op in the windows
