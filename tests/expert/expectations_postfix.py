"""Gains after a fix (branch postfix, issue #34): where a DataLoader or the allocator calls set the step, the
device-side findings also state their gain once that bound is fixed. Imported at the end of expectations.py; adds
to its REAL. Numbers from the events, read by the independent truth (/work/review/truth_B.md B1, B11):

kineto resnet50_num_workers_0 (V100, fp32): `_SingleProcessDataLoaderIter.__next__` 44-73 ms host per step with the
device idle 32-69 ms in it; device busy ~97-100 ms per step; fp32 cuDNN/SGEMM kernels ~60-70 ms of it. Once the
DataLoader is fixed the step is ~117-120 ms of device spans (B2, num_workers=4: 116-127 ms measured), forward still
host-bound (~42 ms host for 33 ms of GPU work), backward GPU-bound (64 ms): AMP then pays on backward's share, at
most ~35 ms (conv/GEMM halved), more than today's ~2.6 ms.
tracelens mi300_resnet18_no_caching_allocator (MI300X, bf16): every `hipFree` synchronizes; the allocator's fix
leaves a GPU-bound ~72-75 ms iteration in which the `batched_transpose_*` kernels take ~11.5-11.8 ms.
"""

from __future__ import annotations

from tests.expert.expectations import REAL

B1 = "kineto/samples/resnet50_num_workers_0"
B11 = "tracelens/mi300_resnet18_no_caching_allocator.json.gz"
# 5.00-34.99 ms once the DataLoader no longer sets the step (more than now, less than conv/GEMM halved)
FP32_AFTER = r"\b([5-9]|[12]\d|3[0-4])\.\d\d ms per step once the DataLoader[^;]* no longer sets the step \(simulated"
LAYOUT_AFTER = r"\b1[01]\.\d\d ms per step once the allocator calls[^;]* no longer set the step \(simulated"

REAL[B1]["problems"] = REAL[B1]["problems"] + [
    {"id": "fp32_after_dataloader", "what": "AMP pays once the DataLoader no longer sets the step (truth B1-P2)",
     "any": [{"where": "finding", "rules": ["fp32_gemm"], "text": FP32_AFTER}]}]
REAL[B11]["problems"] = REAL[B11]["problems"] + [
    {"id": "layout_after_allocator", "what": "after the allocator fix the step is GPU-bound, transposes ~11.5 ms "
                                             "of it (truth B11-P2)",
     "any": [{"where": "finding", "rules": ["data_movement"], "text": LAYOUT_AFTER}]}]
