"""Which implementation an optimizer step runs (diagnose/metrics/rank/optimizer_kind.py), from op and kernel names
as PyTorch records them for each of torch.optim's three paths."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.optimizer_kind import foreach_ops, impl

FOREACH_K = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
             "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>>")
FUSED_ADAM_K = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
                "::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>")
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


@pytest.mark.parametrize("ops,kernels,want", [
    ({"aten::_foreach_mul_", "aten::_foreach_add_", "aten::result_type"}, {FOREACH_K}, "foreach"),
    ({"aten::_fused_sgd_"}, set(), "fused"),
    ({"aten::_fused_adamw_", "aten::empty"}, {FUSED_ADAM_K}, "fused"),
    ({"aten::lerp_", "aten::_foreach_add_"}, {FUSED_ADAM_K}, "fused"),  # the kernel says fused (apex-style wrapper)
    ({"aten::add_", "aten::mul_", "aten::addcdiv_"}, {ELEMENTWISE}, "per_param"),
    ({"aten::_fused_dropout"}, {ELEMENTWISE}, "per_param"),  # not an optimizer's fused op
    (set(), {FOREACH_K}, ""),  # no op recorded under the span: nothing says which
])
def test_impl(ops, kernels, want):
    assert impl(ops, kernels) == want


def test_foreach_ops_counts_calls():
    assert foreach_ops(["aten::_foreach_mul_", "aten::result_type", "aten::_foreach_add_", "aten::_foreach_add_"]) == 3
