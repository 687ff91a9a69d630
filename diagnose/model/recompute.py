"""Activation checkpointing's recomputation on one rank (metrics/rank/recompute.py): the forward that
`torch.utils.checkpoint` (non-reentrant) runs again inside backward, read from its `recompute_fn` Python spans
(a trace recorded with `with_stack=True`). Every time is a mean per step (ms) over the rank's analysis windows;
rules/recompute.py reads it. A rank without such spans has no record (None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass  # its __init__ compiled once per user (model/code_cache.py)


@dataclass
class Recompute:
    spans: float = 0.0  # `torch/utils/checkpoint.py(...): recompute_fn` spans per step (one per checkpointed segment)
    host_ms: float = 0.0  # host time per step inside them (their union)
    device_ms: float = 0.0  # device time per step of the non-collective ops launched inside them (union)
    kernels: float = 0.0  # those device ops per step
    transpose_ms: float = 0.0  # of device_ms: layout-transpose kernels (`transpose` in the name)
    comm_overlap_ms: float = 0.0  # of device_ms: the part with a collective running on the device meanwhile
