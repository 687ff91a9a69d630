"""Issue #34 recall, part B (branch recallB): problems a fresh expert named on real traces nobody here tuned on.
Imported at the end of expectations.py; adds to its REAL. Numbers from the events (python + gzip/json, independent of
llmdiag; the scripts' arithmetic is written out in each `why`).

kineto resnet50_num_workers_4, run 2 (steps 16-21): per step one `cudaMemcpyAsync` of the input images, its copy
`Memcpy HtoD (Pageable -> Device)` of 2.83-2.99 ms. In steps 17-20 the call holds the host 8.65 / 9.24 / 9.21 /
10.08 ms and its copy begins 5.83 / 6.42 / 6.44 / 7.28 ms into the call, the device running the step's queued
kernels for 5.24 / 5.83 / 5.85 / 6.68 ms of that (the union of every device op inside [call start, copy start]);
step 16's call (45.7 ms, the first) and step 21's wait for no kernel (the device idle before their copies). Mean
over the 6 steps: 3.93 ms/step the host waits for queued kernels in that copy, plus 0.07 ms/step in
`cudaStreamSynchronize`: 4.00 ms/step. The fp32 kernels on the path × (1 − 1/4) are far above it, so the host's
waits bound the fp32 gain where the host sets the step: 4.00 ms/step (the expert: "~5-6 ms" per steady step).

hta/a100_16rank_alltoall (ProfilerSteps 550-554): 14 `cudaGraphLaunch` per step; a replay is ready at the later of its
launch call's start and the end of the previous op on its first recorded node's stream (its nodes: the device ops with
the launch's correlation id), and runs to its last node's end. Device idle (no op on any stream) inside the replays, in
stretches of >= 1 ms, per host ProfilerStep: 35.97 / 120.87 / 125.31 / 121.18 / 126.16 ms (mean 105.9; step 550's
longest replay was launched before the capture), 11.6 / 83.7 / 84.6 / 83.3 / 83.9 of it before a replay's first
recorded node; the longest stretch 63.3-64.3 ms in steps 551-554, 35 ms into the step, after stream 7 drained, before
the first recorded node (a Memset) of a graph launched under `CompiledFunctionBackward` ~130 ms earlier (no stream
wait between). Nothing in the trace says what the replay waited on. Meanwhile the host sits 145.6-146.9 ms per step
in `aten::to` -> `cudaMemcpyAsync` (704-B `Memcpy DtoH (Device -> Pageable)` of the input splits) under
`## sparse_data_dist ##`, then 4.4-4.9 ms in a second one: the device had work queued through both (its idle waiting
for a launch inside them: 0.02-0.03 ms per step; 2.1-3.5 ms per step in the whole step), so the expert's "host sync
holding the device idle while inputs are distributed" is not what the events show: the host waits on the device.

DDP (`torch.distributed.ddp.reducer::copy_bucket_to_grad`, recorded by PyTorch's reducer only without
`gradient_as_bucket_view=True`; `torch::distributed::reducer::mul_out` the copy into the bucket): hta/nccl_data
steps 4-6: 161 of each per step; the copy-back ops' 161 `Memcpy DtoD` copies 0.50 / 0.50 / 0.52 ms, their host time
8.96 / 8.75 / 8.69 ms, the device idle inside them 7.60 / 7.36 / 7.27 ms: 7.92 ms per step of idle + copies (mean).
tracelens/mi300_ddp8_actckpt steps 15-17: 62 per step, copies 0.283 / 0.288 / 0.261 ms, no idle inside: 0.28 ms.
The kineto samples and the torchrec sets hold no `copy_bucket_to_grad`.
"""

from __future__ import annotations

from tests.expert.expectations import REAL


def _add(name: str, problems: list[dict], claims: list[dict], silent: list[dict] | None = None) -> None:
    e = REAL[name]
    e["problems"] = e["problems"] + problems
    e["claims"] = claims + e["claims"]
    e["silent"] = e["silent"] + list(silent or [])


_add("kineto/samples/resnet50_num_workers_4", [], [
    {"verdict": "wrong", "rules": ["fp32_gemm"], "gain_ms": [3.9, 6.7], "gain_outside": True,
     "why": "the host waits for queued kernels 3.93 ms/step (mean of steps 16-21; 5.24-6.68 in steps 17-20) inside "
            "its pageable image copy, plus 0.07 ms/step of syncs: faster kernels take up to that off the step"},
    {"verdict": "right", "rules": ["fp32_gemm"], "text": r"held the host while queued kernels ran",
     "why": "the bound is the host's waits for the GPU, the pageable copy's wait behind queued kernels among them "
            "(4.00 ms/step)"}])


GRAPH_SAYS = r"does not show what the replays waited on"
_add("hta/a100_16rank_alltoall_rank0.json.gz", [
    {"id": "graph_replay_idle", "what": "the GPU idles 121-126 ms per steady step inside CUDA-graph replays (mean 105.9 "
                                        "over steps 550-554), 63-64 ms of it in one stretch before a backward graph's "
                                        "first recorded node; the trace does not show why",
     "any": [{"where": "finding", "rules": ["graph_replay_idle"], "min_severity": "medium",
              "text": r"CompiledFunctionBackward[\s\S]*" + GRAPH_SAYS + r"[\s\S]*cuda-graph-trace=node"}]},
    {"id": "input_dist_sync", "what": "the host-synchronous input distribution (`aten::to` under `## sparse_data_dist ##`, "
                                      "145.6-146.9 ms per step) named, with the wait's direction the events show",
     "any": [{"where": "finding", "rules": ["graph_replay_idle"],
              "text": r"sparse_data_dist[\s\S]*host waited on the device, not the device on the host"}]}], [
    {"verdict": "wrong", "rules": ["graph_replay_idle"], "gain_ms": [100.0, 110.0], "gain_outside": True,
     "why": "105.9 ms per step of idle inside the replays (host ProfilerSteps; 106.3 on the device's windows)"},
    {"verdict": "right", "rules": ["graph_replay_idle"], "text": GRAPH_SAYS,
     "why": "idle inside the replays, its cause honestly not shown, the next capture named"}], [
    {"id": "no_sync_idles_device", "why": "the device had work queued through the host's syncs (0.02 ms per step of "
                                          "idle waiting for a launch inside them)",
     "match": {"where": "finding", "rules": ["host_sync", "pageable_copy"], "min_severity": "medium"}}])
_add("hta/nccl_data.json.gz", [
    {"id": "ddp_grad_copy", "what": "DDP without gradient_as_bucket_view: 161 copy_bucket_to_grad per step, 7.92 ms of "
                                    "device idle inside them and copies",
     "any": [{"where": "finding", "rules": ["ddp_grad_copy"], "min_severity": "medium",
              "text": r"161 `torch\.distributed\.ddp\.reducer::copy_bucket_to_grad`[\s\S]*gradient_as_bucket_view=True"}]}], [
    {"verdict": "wrong", "rules": ["ddp_grad_copy"], "gain_ms": [7.6, 8.2], "gain_outside": True,
     "why": "idle inside the copy-back ops 7.27-7.60 ms + their copies 0.50-0.52 ms per step (mean 7.92)"},
    {"verdict": "right", "rules": ["ddp_grad_copy"], "why": "DDP's copies, evidenced by copy_bucket_to_grad"}])
_add("tracelens/mi300_ddp8_actckpt_rank0.json.gz", [
    {"id": "ddp_grad_copy", "what": "DDP without gradient_as_bucket_view: 62 copy_bucket_to_grad per step, 0.28 ms of "
                                    "DtoD copies on a device-bound step",
     "any": [{"where": "finding", "rules": ["ddp_grad_copy"],
              "text": r"62 `torch\.distributed\.ddp\.reducer::copy_bucket_to_grad`"}]}], [
    {"verdict": "wrong", "rules": ["ddp_grad_copy"], "gain_ms": [0.25, 0.31], "gain_outside": True,
     "why": "copies 0.26-0.29 ms per step, no idle inside the ops"},
    {"verdict": "right", "rules": ["ddp_grad_copy"], "why": "DDP's copies, evidenced by copy_bucket_to_grad"}])
for _name in ("kineto/samples/resnet50_num_workers_0", "kineto/samples/resnet50_num_workers_4",
              "torchrec/sst_long_a2a_optimizer_3"):
    REAL[_name]["silent"].append({"id": "no_ddp_grad_copy", "why": "no copy_bucket_to_grad op in the trace",
                                  "match": {"where": "finding", "rules": ["ddp_grad_copy"]}})
