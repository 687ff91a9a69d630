"""fp32_gemm on fp32 convolutions (issue #34): counted with the GEMMs, titled for them, channels_last said as an
assumption where no NCHW <-> NHWC transform shows; the gain the same model's (3 ms of conv × (1 − 1/4))."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.rules.base import FP32_TO_BF16_SPEEDUP
from tests.unit.rules.test_precision_rule import A100, P100, V100, _fp32, _trace

SCUDNN = "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1"


def test_a100_fp32_convolution_advises_bf16_not_the_matmul_flag(tmp_path):
    a = _trace(tmp_path, A100, SCUDNN, 3000, 1000)
    (f,) = _fp32(a)
    assert f.title == "fp32 convolutions on a tensor-core GPU"
    assert "torch.bfloat16" in f.action and "matmul.allow_tf32" not in f.action  # no fp32 matmul to flip
    assert "channels_last" in f.action and "an assumption" in f.action  # no transform kernel in this trace
    assert a.ranks[0].hints.conv_ms_by_precision == pytest.approx({"fp32": 3.0})
    assert a.ranks[0].hints.fp32_gemm_frac == pytest.approx(3000 / 4000)
    assert f.gain_ms == pytest.approx(3.0 * (1 - 1 / FP32_TO_BF16_SPEEDUP), rel=1e-6)


def test_v100_dgrad_engine_counts(tmp_path):
    a = _trace(tmp_path, V100, "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)", 3000, 1000)
    (f,) = _fp32(a)
    assert f.title == "fp32 convolutions on a GPU with fp16 tensor cores" and "GradScaler" in f.action


@pytest.mark.parametrize("props,kernel", [
    (V100, "volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1"),  # fp16 already
    (P100, "pascal_scudnn_128x64_relu_interior_nn_v1"),  # no tensor cores
])
def test_silent(tmp_path, props, kernel):
    assert not _fp32(_trace(tmp_path, props, kernel, 3000, 1000))
