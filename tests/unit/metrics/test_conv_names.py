"""Convolution kernel names (metrics/rank/conv_names.py): which count with the GEMMs, in which precision, and which
are NCHW <-> NHWC transforms. Names as cuDNN writes them in real traces (hta/ns_resolution, kineto ResNet-50,
hta/nccl_data) and in its published fp16 kernels."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.conv_names import conv_precision, is_layout_transform
from llmdiag.diagnose.metrics.rank.precision import is_gemm_name


@pytest.mark.parametrize("name,want", [
    ("volta_scudnn_128x64_relu_interior_nn_v1", "fp32"),
    ("cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1", "fp32"),
    ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "fp32"),
    ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "fp32"),
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*)", "fp32"),
    ("void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*)", "fp32"),
    ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int)", "fp32"),
    ("void cudnn::detail::dgrad2d_alg1_1<float, 0, 6, 7, 5, 4, 5, true, true>(int)", "fp32"),
    ("void cudnn::winograd::winograd3x3Kernel<float, float, 4, 1, 8, 0>(cudnn::maxwell::winograd::KernelParams)", "fp32"),
    ("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1", "fp16"),
    ("ampere_fp16_s1688cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", "fp16"),
    ("volta_h884cudnn_256x64_ldg8_relu_exp_small_nhwc_tn_v1", "fp16"),
    ("volta_int8x4_icudnn_int8x4_128x128_relu_small_nn_v1", "int8"),
    ("turing_s1688cudnn_128x128_ldg8_relu_exp_small_nhwc_tn_v1", "unknown"),  # an mma shape, no input type
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_16x4_nhwc_align4>(x)", "tf32"),
    ("void cudnn::detail::wgrad_alg0_engine<__half, 128, 6, 7, 3, 3, 5, false, 512>(int)", "fp16"),
    # not counted: transforms, FFT, helpers, batch norm
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(x)", None),
    ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*)", None),
    ("cask_cudnn_infer::computeBOffsetsKernel(cask_cudnn_infer::ComputeBOffsetsParams)", None),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float)", None),
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)", None),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(x)", None),
])
def test_conv_precision(name, want):
    assert conv_precision(name) == want
    assert not is_gemm_name(name)  # none of these was counted before: no kernel is counted twice


def test_convolutions_named_as_gemms_stay_gemms():
    for name in ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int)",
                 "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4"):
        assert is_gemm_name(name)


def test_layout_transforms():
    assert is_layout_transform("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
                               "(cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, float const*)")
    assert is_layout_transform("void nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int)")
    # a convolution whose name tags its output layout is no transform
    assert not is_layout_transform("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1")
    assert not is_layout_transform("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)")
