"""Normalization kernels and the pointwise kernels beside them, of one rank (metrics/rank/norm_fusion.py).

A normalization (batch/layer/group/RMS norm, cuDNN's `bn_fw_*`/`bn_bw_*`, MIOpen's `MIOpenBatchNorm*`, PyTorch's
native `batch_norm_*`/`layer_norm_*` kernels) is memory-bound: it reads and writes its tensor. The pointwise ops
eager PyTorch runs right before or after it on the same stream (ReLU, the residual add, their backward) each read
and write the same tensor again; a fused kernel (torch.compile, a fused conv-BN-ReLU, a fused add+LayerNorm) does
them inside the normalization's pass. Every time is a mean per step (ms) over the rank's windows; rules/fusion.py
reads it. A rank without normalization kernels, or where what fusion removes is under 1 % of its compute kernel
time, has no record (None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field  # its __init__ compiled once per user (model/code_cache.py)


@dataclass
class NormFusion:
    norm_ms: float = 0.0  # the normalization kernels' device time per step
    norm_count: float = 0.0  # normalization kernels per step
    norm_kernel: str = ""  # the longest normalization kernel by total time (cut to 120 characters)
    norm_kernel_ms: float = 0.0  # its device time per step
    native: bool = False  # that kernel is PyTorch's own (`at::native::`), not cuDNN's / MIOpen's
    unary_ms: float = 0.0  # per step, pointwise kernels of one tensor input (ReLU) in a chain with a normalization
    binary_ms: float = 0.0  # ... of two (the residual add, ReLU's backward `threshold_backward`)
    pointwise_count: float = 0.0  # those chain pointwise kernels per step
    saved_ms: float = 0.0  # the device time fusion removes: unary_ms + binary_ms × SAVED_BINARY (an estimate)
    ops: dict[str, float] = field(default_factory=dict)  # chain pointwise ms per step by launching op, largest first
