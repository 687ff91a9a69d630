"""Normalization kernel names (metrics/rank/norm_fusion.py `is_norm`): the spellings of cuDNN, MIOpen and PyTorch's
native kernels count; kernels already fused by their library or compiler, and MoE routing's `Renormalize`, do not."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.norm_fusion import is_norm


@pytest.mark.parametrize("name", [
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*)",
    "void cudnn::bn_bw_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_bw_1C11_args<float>)",
    "void at::native::batch_norm_backward_kernel<c10::BFloat16, c10::BFloat16, float, int>(x)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*)",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long)",
    "MIOpenBatchNormFwdTrainSpatial",
])
def test_normalization_kernels_count(name):
    assert is_norm(name)


@pytest.mark.parametrize("name", [
    "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, long)",
    "triton_per_fused_native_layer_norm_0",
    "void moe::dev::routing::routingRenormalize::routingIndicesHistogramScoresKernel<x>(x)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >(x)",
    "volta_sgemm_128x64_nn",
])
def test_fused_and_other_kernels_do_not(name):
    assert not is_norm(name)

