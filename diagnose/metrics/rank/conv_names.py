"""Convolution kernels whose work tensor (matrix) cores could do, and their input precision, from the name only.

Counted (the convolution's multiply-accumulate, which cuDNN runs on tensor cores once the inputs are fp16/bf16/
tf32): cuDNN's SASS kernels `<arch>_<s|h|i>[<mma>]cudnn_...` (`volta_scudnn_128x64_relu_interior_nn_v1`,
`cudnn_train_volta_scudnn_...`: `s` fp32, `h` fp16, `i` int8; a type token before it wins:
`volta_fp16_s884cudnn_fp16_...` is fp16), cuDNN's CUTLASS convolutions (`cutlass_tensorop_s1688fprop_optimized_tf32_...`,
`cutlass_simt_sfprop_...`), and cuDNN's templated engines typed by their first template argument
(`cudnn::detail::dgrad_engine<float, ...>`, `dgrad2d_alg1_1<float>`, `wgrad_alg0_engine<float, ...>`,
`winograd3x3Kernel<float, ...>`). Convolutions named as GEMMs (`implicit_convolve_sgemm<float>`,
`sm70_xmma_fprop_implicit_gemm_f32f32_...`, MIOpen `igemm_fwd_...`) are GEMM names already (precision.py).
Not counted: FFT convolutions (`fft2d_r2c_*`), non-fused Winograd's data/filter/output transforms, layout
transforms, cuDNN's offset/helper kernels, batch norm: memory-bound or no tensor-core path.
"""

from __future__ import annotations

import re

from llmdiag.diagnose.metrics.rank.name_memo import per_name

_HEAD = 512
_SASS = re.compile(r"(?:^|_)(?:(bf16|fp16|f16|tf32|int8x4|int8|i8)_)?([hsi])(\d{3,5})?cudnn_")
_CUTLASS = re.compile(r"cutlass_(tensorop|simt)_([hsi])(\d{3,5})?(fprop|dgrad|wgrad)")
_ENGINE = re.compile(r"(?:^|[\s:])(dgrad_engine|dgrad2d_alg\w*|dgrad_1x1\w*|wgrad_alg\d\w*_engine|wgrad_1x1\w*|"
                     r"winograd3x3kernel)\s*<\s*(float|double|__half|half|__nv_bfloat16|c10::half|c10::bfloat16)\b")
_TYPES = {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "tf32": "tf32", "int8x4": "int8", "int8": "int8",
          "i8": "int8"}
_TEMPLATE = {"float": "fp32", "double": "fp64", "__half": "fp16", "half": "fp16", "c10::half": "fp16",
             "__nv_bfloat16": "bf16", "c10::bfloat16": "bf16"}
_LAYOUT = re.compile(r"nchwtonhwc|nhwctonchw")  # the kernels, not a conv kernel's `_nhwc2nchw_` output tag


@per_name
def conv_precision(name: str) -> str | None:
    """Input precision of a counted convolution kernel ("unknown" where its name does not say), or None where
    the name is no counted convolution."""
    low = name[:_HEAD].lower()
    if "cudnn" not in low and "grad" not in low and "winograd" not in low:
        return None
    if (m := _ENGINE.search(low)) is not None:
        return _TEMPLATE[m.group(2)]
    if (m := _CUTLASS.search(low)) is not None:
        tail = low[m.end():]
        for tok, p in (("tf32", "tf32"), ("bf16", "bf16"), ("f16", "fp16")):
            if tok in tail.split("<")[0].split("(")[0]:
                return p
        if m.group(2) == "h":
            return "fp16"
        if m.group(2) == "i":
            return "int8"
        return "tf32" if m.group(1) == "tensorop" else "fp32"  # simt: fp32 on the CUDA cores
    if (m := _SASS.search(low)) is not None:
        if m.group(1):
            return _TYPES[m.group(1)]
        after = low[m.end():].split("_")
        for tok in after[:2]:  # `volta_s884cudnn_fp16_...`: the input type right after
            if tok in _TYPES:
                return _TYPES[tok]
        if m.group(2) == "h":
            return "fp16"
        if m.group(2) == "i":
            return "int8"
        if m.group(3):  # an mma shape with an fp32 accumulator and no input type: not said
            return "unknown"
        return "fp32"  # `scudnn`: fp32 on the CUDA cores
    return None


def is_conv_name(name: str) -> bool:
    return conv_precision(name) is not None


@per_name
def is_layout_transform(name: str) -> bool:
    """cuDNN's NCHW <-> NHWC transform kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`): an NCHW model feeding
    convolutions that read NHWC."""
    return _LAYOUT.search(name[:_HEAD].lower()) is not None
