"""Issue #34 recall, fp32 convolutions (branch fp32conv): the real V100 conv nets spend most of their fp32 time in
cuDNN convolution kernels that fp32_gemm did not count. Imported at the end of expectations.py; adds to its REAL.

Numbers from the events (python + gzip/json, independent of llmdiag): kernels attributed to a step by their launch
(the runtime call's correlation) inside the host's ProfilerStep; fp32 convolutions = `*scudnn*` + `dgrad_engine<float`
+ `wgrad_alg0_engine<float` kernels (none of them a GEMM name), beside `*sgemm*` (cuDNN's `implicit_convolve_sgemm`
and the 1x1 convolutions' `volta_sgemm_*` among them: 99 % of the sgemm time is launched under convolution ops).
  hta/ns_resolution (V100, world 1), steps 103-105 (the steady ones; 101-102 are shorter): convs 31.21 ms/step
  (scudnn 22.68, dgrad 4.72, wgrad 3.81), sgemm 23.48, of 93.68 ms of kernels; the device idles 1.6 % of the step,
  so the step is the device's: 54.69 ms/step of fp32 at the assumed 4x is 41.0 ms/step (GEMMs alone: 17.6).
  kineto resnet50_num_workers_4, run 2: convs 40.53 ms/step (scudnn 16.92, dgrad 14.53, wgrad 9.08), sgemm 21.52,
  of 99.04; num_workers_0, run 2: convs 41.46, sgemm 20.16, of 98.54. Both: the GPU idles in many short waits
  for the host (the host sets the step; it waits in syncs 0.07 / 1.98 ms per step): faster convolutions take
  at most that off the step now (the reviewer: "mixed precision, channels_last, cudnn.benchmark are next").
  NCHW->NHWC transform kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`) run in all three: channels_last is evidenced.
"""

from __future__ import annotations

from tests.expert.expectations import REAL

CONV = r"fp32 (matmuls and )?convolutions on a GPU with fp16 tensor cores"


def _add(name: str, problems: list[dict], claims: list[dict]) -> None:
    e = REAL[name]
    e["problems"] = e["problems"] + problems
    e["claims"] = claims + e["claims"]


_add("hta/ns_resolution_rank-0.pt.trace.json.gz", [
    {"id": "fp32_convs_v100", "what": "fp32 cuDNN convolutions 31.2 ms/step beside 23.5 of sgemm, of 93.7 ms compute, "
                                      "the V100 busy: AMP (fp16 autocast) is the fix",
     "any": [{"where": "finding", "rules": ["fp32_gemm"],
              "text": CONV + r"[\s\S]*31\.[12]\d ms per step of it in fp32 convolution kernels[\s\S]*channels_last"}]}], [
    {"verdict": "wrong", "rules": ["fp32_gemm"], "gain_ms": [36.0, 45.0], "gain_outside": True,
     "why": "54.7 ms/step of fp32 GEMM and convolution kernels on a busy V100: 41.0 ms/step at the assumed 4x"},
    {"verdict": "misleading", "rules": ["fp32_gemm"], "not_text": r"convolution",
     "why": "the convolutions are 31.2 of the 54.7 ms/step of fp32 kernels: a GEMM-only finding misses most of it"}])
for _w, _conv in (("4", r"40\.5[2-4]"), ("0", r"41\.4[5-7]")):
    _add(f"kineto/samples/resnet50_num_workers_{_w}", [
        {"id": "fp32_convs_v100", "what": "fp32 cuDNN convolutions ~41 ms/step of ~99 ms compute, the host setting "
                                          "the step: next once the host is faster",
         "any": [{"where": "finding", "rules": ["fp32_gemm"],
                  "text": CONV + rf"[\s\S]*{_conv} ms per step of it in fp32 convolution kernels[\s\S]*host sets the "
                                 r"step"}]}], [
        {"verdict": "misleading", "rules": ["fp32_gemm"], "min_severity": "medium",
         "why": "the host sets the step (the GPU idles ~20 % in short waits for it, the host waits for the GPU "
                "0.07-2 ms/step): faster convolutions only add idle until the host is faster"},
        {"verdict": "misleading", "rules": ["fp32_gemm"], "not_text": r"convolution",
         "why": "40.5-41.5 of the 61-62 ms/step of fp32 kernels are convolutions"}])
