"""Data movement (branch datamove): device time spent moving data rather than computing, named by a fresh review of
the real traces. Imported at the end of expectations.py; adds to its REAL. Numbers from the events (python +
gzip/json, independent of llmdiag: kernels by name, summed over the trace, divided by its ProfilerSteps).

torchrec sst_long_a2a_optimizer_3 rank 0 (V100): `CatArrayBatchedCopy*` kernels 71.30 ms in the trace's 3 steps
(23.8 ms/step; 21.2 ms/step inside llmdiag's device windows), launched by `aten::cat` (39.6 ms directly, 23.3 ms under
`SplitWithSizesBackward0`, the backward of a forward split); compute ~110 ms/step: ~19 %. optimizer_5 the same
(71.2 ms). Same-dtype copies (`direct_copy_kernel`) 11.4 ms in the trace, 8.3 ms of it under `aten::clone` from
`ViewBackward0` / `aten::reshape`: ~2.6 % of compute, below the rule's 10 %.
tracelens mi300_ddp8_actckpt: MIOpen's `batched_transpose_*_half` 5.25 ms in the trace (1.36 ms/step in the 3
windows, 242 per step), all launched by `aten::miopen_convolution` / `aten::convolution_backward`, whose other
kernels are `igemm_*_nhwc_bf16` (NHWC-native): 21 % of the 6.41 ms compute. mi300_resnet18_no_caching_allocator: the
same transposes 57.6 ms in the trace (11.76 ms/step in the 5 windows), 16 % of compute; its step is the allocator's.
hta nccl_data (A100, TF32): cuDNN's `nchwToNhwcKernel` 12.62 + `nhwcToNchwKernel` 2.50 ms in 3 steps (5.04 ms/step),
beside `sm80_xmma_*_nhwckrsc_*` convolutions: 13 % of compute, the device idle 76 % of the step.
Silent: hta trace_diff (cat 4.6 / 2.6 ms/step, 5.0 / 5.6 % of compute), sampled_pair (5.4 / 4.3 %), a100 all-to-all
(0.7 %), kineto resnet50 (transposes 0.1 %), ns_resolution (0.2 %), b200 vLLM (copies 0.38 ms, 4.4 %); the qcomm
set's casts (`aten::_to_copy`, the codec) are not counted (its same-dtype copies 4.3 % of compute).
"""

from __future__ import annotations

from tests.expert.expectations import REAL

CAT = r"concatenation[\s\S]*`aten::cat`[\s\S]*preallocate"
LAYOUT = r"layout-transpose[\s\S]*convolution[\s\S]*channels_last"
SILENT = {"where": "finding", "rules": ["data_movement"]}


def _add(name: str, problems: list[dict], claims: list[dict], silent: list[dict] | None = None) -> None:
    e = REAL[name]
    e["problems"] = e["problems"] + problems
    e["claims"] = claims + e["claims"]
    e["silent"] = e["silent"] + list(silent or [])


for _name in ("torchrec/sst_long_a2a_optimizer_3", "torchrec/sst_long_a2a_optimizer_5"):
    _add(_name, [{"id": "cat_kernels", "what": "CatArrayBatchedCopy ~21 ms per step of ~110 ms compute (aten::cat)",
                  "any": [{"where": "finding", "rules": ["data_movement"], "gain_ms": [10.0, 24.0], "text": CAT}]}],
         [{"verdict": "wrong", "rules": ["data_movement"], "gain_ms": [10.0, 24.0], "gain_outside": True,
           "why": "the cat kernels take 21-24 ms per step, ~19-20 ms of it with no other kernel, 0-7 ms of that "
                  "beside a collective (the truth: at most 10-15 ms by avoiding the concatenations)"},
          {"verdict": "right", "rules": ["data_movement"], "why": "cat kernels ~19 % of compute, launched by aten::cat"}])
_add("torchrec/sst_long_a2a_optimizer_5_qcomm", [], [
    {"verdict": "right", "rules": ["data_movement"], "why": "the same cat kernels as optimizer_5 (~21 ms per step)"}])
_add("torchrec/sst_sleep_pl_dense_after_backward_2", [], [
    {"verdict": "right", "rules": ["data_movement"], "why": "cat kernels 12.7 ms per step of a ~1.1 s step (low)"}])
_add("tracelens/mi300_ddp8_actckpt_rank0.json.gz", [
    {"id": "layout_transposes", "what": "batched_transpose around MIOpen NHWC convolutions, ~1.4 ms per step",
     "any": [{"where": "finding", "rules": ["data_movement"], "gain_ms": [0.3, 0.8], "text": LAYOUT}]}], [
    {"verdict": "misleading", "rules": ["data_movement"], "min_severity": "medium",
     "why": "the second fresh review: 0.83 of the 1.36 ms run beside the all-reduce that sets the step: at most "
            "~0.5 ms now, a medium overstates it"},
    {"verdict": "right", "rules": ["data_movement"], "why": "transposes 21 % of compute, convolutions NHWC-native"}])
_add("tracelens/mi300_resnet18_no_caching_allocator.json.gz", [
    {"id": "layout_transposes", "what": "batched_transpose around MIOpen NHWC convolutions, ~11.8 ms per step",
     "any": [{"where": "finding", "rules": ["data_movement"], "gain_ms": [8.0, 14.0], "text": LAYOUT}]}], [
    {"verdict": "misleading", "rules": ["data_movement"], "gain_ms": [0.0, 1.0],
     "why": "a third fresh review: every hipFree waits for the device (none ends while it is busy), ~42 ms per "
            "iteration, and 58.2 of the 58.8 ms of transposes run in those waits: ~11.6 ms, not the 0.03 ms a "
            "host-wait count without the frees gave"},
    {"verdict": "right", "rules": ["data_movement"], "why": "transposes 16 % of compute, convolutions NHWC-native"}])
_add("hta/nccl_data.json.gz", [], [
    {"verdict": "misleading", "rules": ["data_movement"], "gain_ms": [0.0, 0.5], "gain_outside": True,
     "why": "the GPU is idle 76 % of the step behind a slow host: channels_last gives ~0 now (the second fresh review)"},
    {"verdict": "right", "rules": ["data_movement"], "why": "cuDNN nchwToNhwc/nhwcToNchw 5.04 ms per step, 13 % of "
                                                            "compute, beside NHWC xmma convolutions; ~0 now, said so"}])
for _name in ("hta/trace_diff", "hta/sampled_pair", "hta/a100_16rank_alltoall_rank0.json.gz",
              "kineto/samples/resnet50_num_workers_0", "kineto/samples/resnet50_num_workers_4",
              "hta/ns_resolution_rank-0.pt.trace.json.gz", "tracelens/b200_vllm_tp8_rank0.json.gz"):
    _add(_name, [], [], [{"id": "no_data_movement", "why": "data-movement kernels at most 5.6 % of compute",
                          "match": SILENT}])
