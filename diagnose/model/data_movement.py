"""Device time spent moving data rather than computing, per kernel family, of one rank
(metrics/rank/data_movement.py): concatenations (`CatArrayBatchedCopy`, launched by `aten::cat`), layout
transposes a convolution library runs around NHWC kernels for NCHW tensors (cuDNN's `nchwToNhwcKernel` /
`nhwcToNchwKernel`, MIOpen's `batched_transpose_*`) and same-dtype copies (`direct_copy_kernel`: `.contiguous()`,
`.clone()`, `.reshape()` of a non-viewable tensor; casts under `aten::_to_copy` are left out, they convert).
Every time is a mean per step (ms) over the rank's analysis windows; rules/data_movement.py reads it. A rank
without any such kernel has no record (None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field  # its __init__ compiled once per user (model/code_cache.py)

FAMILIES = ("cat", "layout", "copy")


@dataclass
class MoveOp:
    """One host op launching a family's kernels (the innermost `cpu_op` around their launch calls)."""

    op: str  # the op's name (`aten::cat`, `aten::miopen_convolution`, `aten::copy_`)
    parent: str = ""  # the op enclosing it, seen at its longest kernel (`SplitWithSizesBackward0`, `aten::clone`)
    ms: float = 0.0  # its family kernels' device time per step
    count: float = 0.0  # its family kernels per step


@dataclass
class MoveFamily:
    family: str  # one of FAMILIES
    kernel_ms: float = 0.0  # the family's kernels' device time per step (summed)
    busy_ms: float = 0.0  # of that, per step, the time no other kernel / memcpy / memset runs (any stream; a
    # collective beside them does not count as other work): the device's busy path
    under_comm_ms: float = 0.0  # the part of busy_ms during which a collective kernel runs
    count: float = 0.0  # kernels per step
    kernel: str = ""  # the family's longest kernel name by total time (cut to 120 characters)
    ops: list[MoveOp] = field(default_factory=list)  # the launching ops, most device time first (at most 3)
    nhwc_convs: bool = False  # layout: the same convolution ops also ran kernels whose names say NHWC


@dataclass
class DataMovement:
    families: list[MoveFamily] = field(default_factory=list)  # those with kernels in the windows

    def family(self, name: str) -> MoveFamily | None:
        return next((f for f in self.families if f.family == name), None)
