"""Normalization chains (branch fusion, issue #34): pointwise kernels chained to normalization kernels on the path
of the step (`norm_fusion`). Imported at the end of expectations.py; adds to its REAL. Numbers from the events
(python + gzip/json, independent of llmdiag: kernels by name, summed over the trace, divided by its 5 steps),
read by the independent truth (/work/review/truth_B.md B3, B11):

hta ns_resolution (V100, fp32 ResNet-50, device 98.8 % busy): cuDNN `bn_fw_tr_*`/`bn_bw_*` 17.21 ms per step,
elementwise `clamp` (ReLU) 3.00, `threshold` (ReLU backward) 4.61, `add` 5.37, `Mul` 0.53 ms per step. Fused, ReLU
wholly and the two-input ops by 2/3: 3.00 + (4.61 + 5.37) × 2/3 = 9.65 ms, ~10 % of the 95.6 ms step (the truth: 5-10
ms, unsure).
tracelens mi300_resnet18_no_caching_allocator (MI300X, bf16): native `batch_norm_*` kernels 31.12 ms per iteration
(`batch_norm_backward_kernel<BFloat16>` 22.3 of it), `clamp` 1.46, `threshold` 1.57, `add` 1.21 ms: 3.3 ms fused, a
~4 % share of the ~75-79 ms iteration once the allocator is fixed (the truth: GPU-bound at ~72 ms after its fix).
Silent: nccl_data (the same ResNet-50 kernels, the device idle 76 % of a host-bound step: nothing now, no removable
bound), mi300_ddp8_actckpt (BN chains ~0.5 ms of an 18.8 ms step an all-reduce sets), trace_diff and its control
(LayerNorm chains ~1.2-1.6 ms of 77-124 ms steps), b200 vLLM (its RMSNorm is already fused).
"""

from __future__ import annotations

from tests.expert.expectations import REAL

B3 = "hta/ns_resolution_rank-0.pt.trace.json.gz"
B11 = "tracelens/mi300_resnet18_no_caching_allocator.json.gz"
SILENT = {"where": "finding", "rules": ["norm_fusion"]}
B3_GAIN = r"≈ ([5-9]|10)\.\d\d ms per step"  # 5.00-10.99: the truth's 5-10 ms, the events' 9.65
B11_AFTER = r"\b[2-4]\.\d\d ms per step once the allocator calls[^;]* no longer set the step"

REAL[B3]["problems"] = REAL[B3]["problems"] + [
    {"id": "norm_fusion", "what": "BN + ReLU/add traffic on a GPU-bound fp32 ResNet-50: fusion ~5-10 ms (truth B3-P2)",
     "any": [{"where": "finding", "rules": ["norm_fusion"], "min_severity": "medium", "text": B3_GAIN}]}]
REAL[B3]["claims"] = REAL[B3]["claims"] + [
    {"verdict": "right", "rules": ["norm_fusion"], "why": "BN 17.2 ms + ReLU/add 13.5 ms per step on a 99 % busy GPU"}]
REAL[B11]["problems"] = REAL[B11]["problems"] + [
    {"id": "norm_after_allocator", "what": "after the allocator fix: native bf16 BN backward 22 ms and its ReLU/add "
                                           "neighbours (truth B11-P2)",
     "any": [{"where": "finding", "rules": ["norm_fusion"],
              "text": r"batch_norm_backward_kernel[\s\S]*native[\s\S]*" + B11_AFTER}]}]
REAL[B11]["claims"] = REAL[B11]["claims"] + [
    {"verdict": "right", "rules": ["norm_fusion"], "why": "native BN 31 ms of ~72 ms GPU work per iteration"}]
for name in ("hta/nccl_data.json.gz", "tracelens/mi300_ddp8_actckpt_rank0.json.gz", "hta/trace_diff",
             "hta/trace_diff/control.json.gz",
             "tracelens/b200_vllm_tp8_rank0.json.gz"):
    REAL[name]["silent"] = REAL[name]["silent"] + [
        {"id": "no_norm_fusion", "why": "normalization chains off the step's path or too small to state",
         "match": SILENT}]
for name in ("kineto/samples/resnet50_num_workers_0", "kineto/samples/resnet50_num_workers_4"):
    REAL[name]["claims"] = REAL[name]["claims"] + [
        {"verdict": "unverified", "rules": ["norm_fusion"],
         "why": "the same fp32 ResNet-50 chains (BN 16.0 ms, chain kernels 13.2 ms per step): the backward is "
                "GPU-bound (truth B1/B2), the truth ranks no fusion item there"}]
