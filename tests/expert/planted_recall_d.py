"""Planted scenarios for issue #34's recall on the conv-net class: fp32 convolutions on a GPU with fp16 tensor cores.
Real cases: hta/ns_resolution (V100, ResNet-50 fp32, the device busy: 31.2 ms/step in cuDNN `scudnn`/`dgrad`/`wgrad`
<float> kernels beside 23.5 ms/step of `sgemm`, of 93.6 ms compute) and the kineto ResNet-50 samples (V100, 40.5 of
99.0 ms/step in convolution kernels, the host setting the step). The job is planted.py's on a V100 with its
autograd names; a chore places CONVS convolution ops at each step's start (`aten::cudnn_convolution`, one kernel of
CONV_US each), the device drained before them. Every answer below is arithmetic on the placed durations, written
out here, not read back from llmdiag:

  compute per step = forward 12 x (3000 + 400) + backward 12 x (4000 + 500) + optimizer 6 x 300 = 96,600 us of the
  job, + CONVS x CONV_US of convolutions (+ TRANSFORM_US of NCHW->NHWC transform where planted);
  gain = fp32 time on the path x (1 - 1/4), 4 the assumed V100 speed-up (model/gemm_speedup.py): the convolutions
  (and GEMMs) are queued back to back behind the host (30 us per op against 2-4 ms kernels), every later op moves
  earlier by what they lose, so the step shortens by exactly that.
Twins: the same convolutions in fp16 (`volta_fp16_s884cudnn_fp16_*`): silent; the same fp32 convolutions with
4 ms of host work per op (each kernel but the last ends before the next launch): 1.50 ms of gain, low."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import V100, Knobs

CONVS, CONV_US, TRANSFORM_US = 20, 2000.0, 50.0
JOB_US = 12 * (3000.0 + 400.0) + 12 * (4000.0 + 500.0) + 6 * 300.0  # the job's own compute per step
SPEEDUP = 4.0
FP32 = ("volta_scudnn_128x64_relu_interior_nn_v1",
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, "
        "float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int)",
        "void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*, "
        "float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)")
FP16 = ("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1",
        "volta_fp16_s884cudnn_fp16_128x128_ldg8_splitK_relu_f2f_exp_small_nhwc_tn_v1")
TRANSFORM = ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>"
             "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)")
FINDING = {"where": "finding", "rules": ["fp32_gemm"]}


def _convs(rk, k, facts, step, names=FP32, host_us=None, transform=False):
    """CONVS convolution ops at the step's start, their kernels cycling through `names`; `host_us`: each op's host
    time (None: the job's 30 us, the host far ahead). `transform`: one NCHW->NHWC transform kernel first."""
    if step is None:
        return
    if transform:
        rk.launch("aten::cudnn_convolution", TRANSFORM, TRANSFORM_US, k)
    for i in range(CONVS):
        rk.launch("aten::cudnn_convolution", names[i % len(names)], CONV_US, k, host_us=host_us)


def _pct(x: float) -> str:
    return rf"{100 * x:.1f}%".replace(".", r"\.")


def recall_d_scenarios() -> dict[str, tuple[Knobs, dict]]:
    out = {}
    conv = CONVS * CONV_US
    v100 = dict(device=dict(V100), autograd=True)
    # 1. fp16 GEMMs, fp32 convolutions (and the transform that shows an NCHW model): only the convolutions count.
    compute = JOB_US + conv + TRANSFORM_US
    gain = conv * (1 - 1 / SPEEDUP) / 1000  # 30.00 ms per step
    text = (rf"rank \d: {_pct(conv / compute)} of {compute / 1000:.2f} ms compute per step in fp32 convolutions .*"
            rf"{conv / 1000:.2f} ms per step of it in fp32 convolution kernels")
    out["fp32_convs_v100"] = (Knobs(**v100, gemm="fp16", chore=partial(_convs, transform=True)), {
        "problems": [{"id": "fp32_convs", "what": f"{CONVS} fp32 cuDNN convolutions of {CONV_US / 1000:g} ms per step "
                                                  f"on a V100, queued: {gain:.2f} ms/step at 4x",
                      "any": [{**FINDING, "text": r"^fp32 convolutions on a GPU with fp16 tensor cores \| " + text,
                               "gain_ms": [gain - 0.05, gain + 0.05], "min_severity": "high"}]},
                     {"id": "channels_last_from_transforms", "what": "the NCHW->NHWC transform: channels_last, with it",
                      "any": [{**FINDING, "text": r"channels_last[\s\S]*0\.05 ms per step in cuDNN's NCHW"}]}],
        "silent": [{"id": "no_matmul_claim", "why": "every GEMM is fp16 (h884): only the convolutions are fp32",
                    "match": {**FINDING, "text": r"^[^|]*matmul"}},
                   {"id": "no_tf32_on_v100", "why": "V100 has fp16 tensor cores only",
                    "match": {**FINDING, "text": r"bfloat16|allow_tf32"}}],
        "claims": [{"verdict": "wrong", "rules": ["fp32_gemm"], "gain_ms": [gain - 0.05, gain + 0.05],
                    "gain_outside": True, "why": f"0.75 x {conv / 1000:g} ms of queued fp32 convolutions per step"},
                   {"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 convolutions on a V100, on the path"}]})
    # 2. fp32 GEMMs and fp32 convolutions, no transform kernel: both counted; channels_last only as an assumption.
    f32 = 12 * 3000.0 + 12 * 4000.0 + conv
    compute = JOB_US + conv
    gain2 = f32 * (1 - 1 / SPEEDUP) / 1000  # 93.00 ms per step
    out["fp32_gemms_convs_v100"] = (Knobs(**v100, gemm="fp32", chore=_convs), {
        "problems": [{"id": "fp32_gemms_convs", "what": f"fp32 GEMMs and convolutions, {f32 / 1000:g} ms/step queued",
                      "any": [{**FINDING,
                               "text": r"^fp32 matmuls and convolutions on a GPU with fp16 tensor cores \| "
                                       rf"rank \d: {_pct(f32 / compute)} of {compute / 1000:.2f} ms compute per step in fp32 "
                                       rf"GEMMs and convolutions .*{conv / 1000:.2f} ms per step of it in fp32 "
                                       r"convolution kernels",
                               "gain_ms": [gain2 - 0.05, gain2 + 0.05], "min_severity": "high"}]}],
        "silent": [{"id": "channels_last_not_claimed_as_seen", "why": "no transform kernel: channels_last is an "
                                                                      "assumption, said as one",
                    "match": {**FINDING, "text": r"channels_last", "not_text": r"an assumption"}}],
        "claims": [{"verdict": "wrong", "rules": ["fp32_gemm"], "gain_ms": [gain2 - 0.05, gain2 + 0.05],
                    "gain_outside": True, "why": f"0.75 x {f32 / 1000:g} ms of queued fp32 kernels per step"},
                   {"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 GEMMs and convolutions on a V100"}]})
    out["fp16_convs_v100_twin"] = (Knobs(**v100, gemm="fp16", chore=partial(_convs, names=FP16, transform=True)), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_fp32_finding", "why": "fp16 s884 cuDNN convolutions and h884 GEMMs: nothing in fp32",
                    "match": FINDING}]})
    # 3. Host-bound: 4 ms of host work per convolution op, 2 ms kernels. Each kernel (launched 30 us before its op
    # ends, starting 10 us later) ends 1,990 us before the next op's launch, but the last: the job's first GEMM op
    # (30 us) is launched while it runs, and the job's queue follows it. So one convolution of CONVS is on the path:
    # 0.75 x 2 ms = 1.50 ms per step; what the other 19 lose only adds idle (the device idles 2 ms before each).
    last = CONV_US * (1 - 1 / SPEEDUP) / 1000
    out["host_bound_fp32_convs_twin"] = (Knobs(**v100, gemm="fp16", chore=partial(_convs, host_us=4000.0)), {
        "problems": [],
        "silent": [{"id": "no_conv_gain", "why": "only the last of the 20 fp32 convolutions is on the path",
                    "match": {**FINDING, "min_severity": "medium"}},
                   {"id": "says_host_sets_step", "why": "the finding must say why the gain is small",
                    "match": {**FINDING, "not_text": r"host sets the step|only add idle"}}],
        "claims": [{"verdict": "wrong", "rules": ["fp32_gemm"], "gain_ms": [last - 0.05, last + 0.05],
                    "gain_outside": True, "why": f"one convolution of {CONVS} on the path: {last:.2f} ms per step"},
                   {"verdict": "right", "rules": ["fp32_gemm"], "why": "fp32 convolutions, little gain while host-bound"},
                   {"verdict": "right", "rules": ["host_bound"],
                    "why": "host-bound by construction: 4 ms of host work per 2 ms convolution"}]})
    return out
