"""Which implementation an optimizer step runs, read from the op names inside its `Optimizer.step#...` span
(metrics/rank/optimizer_step.py) and the device ops it launches: the lever a recommendation may name depends on it
(rules/optimizer.py). torch.optim's three paths leave distinct names:

- fused: one `aten::_fused_<name>_` op per parameter group (`_fused_adamw_`, `_fused_sgd_`, `_fused_adam_`), or a
  kernel of a fused optimizer's functor (`FusedAdamMathFunctor`, `FusedSgdMathFunctor`, apex's `multi_tensor_*`
  of a fused optimizer);
- foreach: `aten::_foreach_*` ops (one per update term, each over every parameter);
- per-parameter: neither, the update runs one op (and kernel) per parameter per term (`aten::add_`, `aten::mul_`).

A `_foreach_*` op on its slow path (tensors of mixed device, dtype or layout) still launches one kernel per tensor:
its name says foreach, the kernels say otherwise (OptimizerStep.multi_tensor, read from the kernels)."""

from __future__ import annotations

import re

from llmdiag.diagnose.model.lazy_re import lazy_compile

FUSED_OP = lazy_compile(r"^aten::_fused_(sgd|adam|adamw|adagrad)_")
FUSED_KERNEL = lazy_compile(r"Fused(Adam|AdamW|Sgd|SGD|Adagrad)\w*Functor|fused_(adam|sgd|adagrad)", re.I)
FOREACH_OP = lazy_compile(r"^aten::_foreach_")

FUSED, FOREACH, PER_PARAM = "fused", "foreach", "per_param"


def impl(op_names: set[str], kernel_names: set[str]) -> str:
    """"fused", "foreach" or "per_param" (see the module's docstring); "" where the span holds no op at all (a
    capture without ops under the annotation: nothing says which)."""
    if any(FUSED_OP.search(s[:120]) for s in op_names) or any(FUSED_KERNEL.search(s[:300]) for s in kernel_names):
        return FUSED
    if any(FOREACH_OP.search(s[:120]) for s in op_names):
        return FOREACH
    return PER_PARAM if op_names else ""


def foreach_ops(op_names: list[str]) -> int:
    """How many `aten::_foreach_*` ops the span's list of op names (one entry per call) holds."""
    return sum(1 for s in op_names if FOREACH_OP.search(s[:120]))
