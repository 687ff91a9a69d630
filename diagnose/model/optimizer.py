"""The optimizer step of one rank (metrics/rank/optimizer_step.py): the `Optimizer.step#<Name>.step` host span
that leaves the device idlest, what it launches and how long the device idles inside it. Every time is a mean per
step (ms) over the rank's analysis windows; rules/optimizer.py reads it. A rank without such a span has no record
(None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass  # its __init__ compiled once per user (model/code_cache.py)


@dataclass
class OptimizerStep:
    op: str = ""  # the span's name (`Optimizer.step#Shampoo.step`)
    name: str = ""  # the optimizer's class, read from it (`Shampoo`)
    steps: int = 0  # analysis windows holding the span
    host_ms: float = 0.0  # host time per step inside the span (its calls' union)
    idle_ms: float = 0.0  # device idle per step inside the span (no kernel, copy, memset or collective running)
    kernels: float = 0.0  # device ops per step launched by calls inside the span (by correlation id)
    kernel_ms: float = 0.0  # their device time per step
    kernel_median_us: float = 0.0  # the median one's time (µs)
    comm_ms: float = 0.0  # of kernel_ms, collectives' (a ZeRO / distributed-Shampoo parameter all-gather)
    comm_name: str = ""  # the longest of those collectives
    multi_tensor: bool = False  # a multi-tensor kernel among those launched inside (read from the kernels)
    others_ms: float = 0.0  # host time per step of the other optimizers' step spans (an EMA after the main one)
    impl: str = ""  # "fused", "foreach" or "per_param", read from the op names inside (metrics/rank/optimizer_kind.py)
    foreach_ops: float = 0.0  # `aten::_foreach_*` ops per step inside the span
    sampled: bool = False  # an event-sampled capture (metrics/rank/idle_stretch.py): kernels are dropped too, so
    # idle_ms is an upper bound and kernels / kernel_ms lower bounds; host_ms stays exact for a kept span
