"""Planted corpus: small 4-rank Kineto traces with one known problem each, and a silent twin of each.

Written for the expert corpus only (independent of tests/gen_*.py and of llmdiag): a tiny event simulation
places every host op, runtime call and kernel, so what was planted is known exactly, and each scenario
carries its own expectations in the same format as the real sets (tests/expert/expectations.py).

The job: 4 ranks, 5 ProfilerSteps; per step a forward (GEMMs + elementwise), an all_to_all
(`ncclDevKernel_SendRecv`) preceded by a host sync (as TorchRec's splits), a backward, three DDP
all-reduces, an optimizer. Collectives end together on every rank: start = the rank's arrival, end = the
last arrival + the transfer.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field, replace

MI300X = {"name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4, "totalGlobalMem": 206141652992}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 85899345920}
V100 = {"name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 16945709056}
GEMM = {"bf16": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
        "fp32": "volta_sgemm_128x64_tn", "fp16": "volta_h884gemm_128x128_ldg8_nn"}
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
NCCL = {"a2a": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
        "ar": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        # DeepEP as DeepSeek's published profile (deepseek-ai/profile-data train.json) names its kernels
        "dispatch": "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, int*)",
        "combine": "void dpsk::ep::internode::combine<true, 8, 8, 2>(int4*, float*, bool const*, int4 const*)"}
CUB_LOOKALIKE = ("void cdpsk::ep::CUB_DeviceScanKernel<cdpsk::ep::CUB_DeviceScanPolicy<int>::Policy600, int*, int*>"
                 "(int*, int*, int)")  # a CUB scan in a namespace that contains `dpsk::ep::`: compute
T0 = 1_700_000_000_000_000.0  # us


@dataclass
class Knobs:
    device: dict = field(default_factory=lambda: dict(A100))
    gemm: str = "bf16"
    ranks: int = 4
    steps: int = 5
    late_rank: int | None = None       # capture starts late on this rank
    late_by: int = 0                   # ... lacking this many leading collectives
    stall_rank: int | None = None      # host stall with no profiled op before the all_to_all
    stall_ms: float = 0.0
    blocking_copy_ms: float = 0.0      # a blocking cudaMemcpy (pageable) per step on every rank
    async_copy: bool = False           # twin: a short cudaMemcpyAsync from pinned memory
    outlier_step: int | None = None    # this step's kernels run 3x longer
    alloc_off: bool = False            # caching allocator off: cudaMalloc/cudaFree around every kernel
    alloc_on: bool = False             # allocator on: 3 cudaMalloc per step (a warm cache)
    long_host_op_ms: float = 0.0       # one long host op (aten::split_with_sizes) mid-forward, GPU drained
    tiny_kernels: int = 0              # launch-bound: this many 4 us kernels behind 30 us host ops per step
    deepep: bool = False               # the all_to_all is DeepEP (dpsk::ep::internode dispatch/combine)
    cub_in_ep_namespace: bool = False  # a compute kernel in the look-alike `cdpsk::ep::` namespace
    t0: float = T0
    runs: int = 1                      # complete runs of the job written into one folder, 180 s apart
    rt: str = "cuda"                   # runtime API prefix ("hip" on ROCm: hipLaunchKernel, hipMemcpyWithStream)
    copy_once_ms: float = 0.0          # ONE blocking copy of this length, in step #12 only
    flush_step: int | None = None      # allocator on, but this step frees the cache: 25 cudaFree + 9 cudaMalloc
    with_stack: bool = False           # python_function events around every host op (with_stack=True)
    cpu_memory_events: bool = False    # [memory] events of CPU allocations only (Device Type 0)
    event_wait_ms: float = 0.0         # a tiny blocking DtoH copy queued behind a kernel that waits this long on
    #                                    an event recorded on side stream 30 (its record fires late)
    stream_wait: bool = False          # the same wait/record calls, the event already done (twin)
    launch_us: float = 8.0             # each cudaLaunchKernel call's duration
    host_us: float = 30.0              # host time per launching op (above a kernel's time: the host bounds it)
    autograd: bool = False             # autograd/optimizer/DDP op names: `...evaluate_function: MmBackward0`,
    #                                    `Optimizer.step#SGD.step`, `DistributedDataParallel.forward`
    forward_only: bool = False         # no backward and no optimizer (an inference capture)
    no_profiler_step: bool = False     # no ProfilerStep annotation: the iterations must be found otherwise
    first_call_shapes: int = 0         # step 0: the first forward aten::mm of each of this many shapes takes
    first_call_ms: float = 2.5         # ... this long on the host (cuBLASLt setup), the host caught up with the GPU
    slow_every_step: bool = False      # twin: the same slow aten::mm calls in every step (not a first call)
    sync_copies: int = 0               # per step, this many synchronous host->device copies (`aten::to` ->
    #                                    `aten::_copy_from`, 500 us each, 10 small DMA requests under each; MTIA's)
    host_ops_twin: int = 0             # twin: as many 500-us host ops (`aten::index_put_`) with no copy
    thread_stall_rank: int | None = None  # this rank's autograd thread stalls inside its backward all_to_all op
    thread_stall_ms: float = 0.0       # ... this long with no child event, while a side-stream kernel every rank
    #                                    runs keeps its device busy (its device idle shows nothing)
    warmup_growth: bool = False        # allocator on; the first step grows the cache: 25 cudaMalloc, no free
    flush_frees: int = 25              # cudaFree calls of the `flush_step` flush (before its 9 cudaMalloc)
    region_stall: bool = False         # every rank's forward all_to_all under a user annotation (`# running sparse
    #                                    arch`, as TorchRec's) that also holds `stall_rank`'s stall before the op
    qcomm_ms: float = 0.0              # a cast kernel of this length before the forward all_to_all, one of half
    #                                    after it (TorchRec's fp16 quantized-comm encode and decode)
    qcomm_annotated: bool = True       # ... inside `## encoder fp16 None ##` / `## decoder ...` ranges (False: plain casts)
    chore: object = None               # fn(rank, knobs, facts, step) placing events at each step's start, the
    #                                    device drained; called once more with step None after the last step
    #                                    (tests/expert/planted_recall_b.py)
    writer: object = None              # fn(folder, prefix) -> paths: writes the whole job instead (planted_recall_f)


SIDE = "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>"
QUEUED = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>"


class Rank:
    def __init__(self, r: int, t0: float = T0, rt: str = "cuda", with_stack: bool = False):
        self.r, self.ev, self.corr, self.rt, self.stack = r, [], 1000 * (r + 1), rt, with_stack
        self.h = t0  # host cursor
        self.launch_us = 8.0
        self.tid = 100 + r  # the host thread events go to (the autograd engine's: 200 + r)
        self.d = t0  # device cursor (compute stream)

    def cpu(self, name, ts, dur, cat="cpu_op", args=None):
        if self.stack and cat == "cpu_op":
            self.ev.append({"ph": "X", "cat": "python_function", "name": "train.py(42): step", "pid": 100 + self.r,
                            "tid": self.tid, "ts": ts - 1.0, "dur": dur + 2.0, "args": {}})
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": 100 + self.r, "tid": self.tid,
                        "ts": ts, "dur": dur, "args": args or {}})

    def runtime(self, name, ts, dur, corr=None):
        a = {"correlation": corr} if corr is not None else {}
        if self.rt != "cuda":
            name = "hipMemcpyWithStream" if name == "cudaMemcpy" else name.replace("cuda", self.rt, 1)
        self.ev.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100 + self.r,
                        "tid": self.tid, "ts": ts, "dur": dur, "args": a})

    def kernel(self, name, ts, dur, stream=7, cat="kernel", at=None):
        self.corr += 1
        self.runtime("cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync", self.h if at is None else at,
                     self.launch_us, self.corr)
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                        "args": {"device": 0, "stream": stream, "correlation": self.corr, "External id": self.corr}})

    def launch(self, op, name, dur, k: Knobs, args=None, host_us=None):
        """A host op launching one kernel on the compute stream, the host running ahead of the device."""
        if k.alloc_off:
            self.runtime("cudaMalloc", self.h, 30.0)
            self.h += 35.0
        hu = host_us or k.host_us
        self.cpu(op, self.h, hu - 5.0, args=args)
        start = max(self.d, self.h + hu - 20.0)
        self.kernel(name, start, dur, at=self.h + hu - 30.0)  # launched at the end of the op's host work
        self.d = start + dur
        self.h += hu
        if k.alloc_off:  # cudaFree synchronises the device: the host waits for the queue, then frees
            self.h = max(self.h, self.d)
            self.runtime("cudaFree", self.h, 160.0)
            self.h += 165.0

    def sync(self):
        t = max(self.h, self.d)
        self.runtime("cudaStreamSynchronize", self.h, t - self.h + 5.0)
        self.h = t + 5.0


def _sync_copies(rk: Rank, k: Knobs):
    """Synchronous copies the host holds until their DMA requests are done (the device drained first), or the
    twin's host ops of the same length with no copy."""
    for _ in range(k.sync_copies or k.host_ops_twin):
        rk.h = max(rk.h, rk.d)
        if k.host_ops_twin:
            rk.cpu("aten::index_put_", rk.h, 500.0)
            rk.h += 505.0
            continue
        for depth, name in enumerate(("aten::to", "aten::_to_copy", "aten::copy_", "aten::_copy_from")):
            rk.cpu(name, rk.h + depth, 500.0 - 2 * depth)
        for j in range(10):
            rk.corr += 1
            at = rk.h + 10 + 48 * j
            rk.runtime("cudaMemcpyAsync", at, 6.0, rk.corr)
            rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "dma HtoD request", "pid": 0, "tid": 7,
                          "ts": at + 30, "dur": 5.0, "args": {"device": 0, "stream": 7, "correlation": rk.corr}})
        rk.d = rk.h + 10 + 48 * 9 + 35
        rk.h += 505.0


def _event_wait(rk: Rank, k: Knobs, facts: dict, step: int):
    """A side-stream kernel and its event record, then on the compute stream: wait on the event, a kernel, and a
    tiny synchronous DtoH copy (`.item()`) behind it. The event fires `event_wait_ms` after the compute stream
    drained (0 with only `stream_wait`); the device idles from the drain until the queued kernel starts, the
    host blocks in the copy meanwhile. facts["event_wait"][step][rank] = (idle inside the copy call, idle)."""
    rk.corr += 1
    rk.runtime("cudaLaunchKernel", rk.h, 8.0, rk.corr)
    rk.ev.append({"ph": "X", "cat": "kernel", "name": SIDE, "pid": 0, "tid": 30, "ts": rk.h + 10, "dur": 150.0,
                  "args": {"device": 0, "stream": 30, "correlation": rk.corr, "External id": rk.corr}})
    rk.corr += 1
    rk.runtime("cudaEventRecord", rk.h + 10, 4.0, rk.corr)
    drain = rk.d
    rk.h = max(rk.h + 20, drain) + 20.0  # the host catches up with the device
    rk.corr += 1
    rk.runtime("cudaStreamWaitEvent", rk.h, 5.0, rk.corr)
    fire = drain + k.event_wait_ms * 1000 if k.event_wait_ms else rk.h
    rk.cpu("aten::cat", rk.h + 8, 20.0)
    rk.corr += 1
    rk.runtime("cudaLaunchKernel", rk.h + 10, 8.0, rk.corr)
    qs = max(fire, rk.h + 15)
    rk.ev.append({"ph": "X", "cat": "kernel", "name": QUEUED, "pid": 0, "tid": 7, "ts": qs, "dur": 20.0,
                  "args": {"device": 0, "stream": 7, "correlation": rk.corr, "External id": rk.corr}})
    call = rk.h + 40
    rk.corr += 1
    rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
                  "ts": qs + 20, "dur": 4.0, "args": {"device": 0, "stream": 7, "correlation": rk.corr}})
    done = qs + 24
    rk.cpu("aten::_local_scalar_dense", call - 2, done - call + 6)
    rk.runtime("cudaMemcpyAsync", call, done - call + 2, rk.corr)
    rk.d, rk.h = done, done + 6
    facts.setdefault("event_wait", {}).setdefault(step, {})[rk.r] = ((qs - max(call, drain)) / 1000,
                                                                       (qs - drain) / 1000)


CAST = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}, at::detail::Array<char*, 2> >")


def _codec(rk: Rank, k: Knobs, what: str):
    """One quantized-comm codec call: an `aten::to` casting to or from fp16, its kernel `qcomm_ms` long (encode) or
    half that (decode), inside TorchRec's ranges where `qcomm_annotated`."""
    h0 = rk.h
    rk.launch("aten::to", CAST, k.qcomm_ms * (1000.0 if what == "encode" else 500.0), k)
    if k.qcomm_annotated:
        rk.cpu(f"## {what[:-1]}er fp16 None ##", h0 - 1.0, rk.h - h0 + 2.0, cat="user_annotation")
        rk.cpu(f"## codecs {what}", h0 - 2.0, rk.h - h0 + 4.0, cat="user_annotation")
    rk.h += 5.0


def _collective(ranks, kind, dur, k: Knobs, label, stall: dict | None = None):
    """`stall`: rank -> us its host thread stalls inside the collective's op before anything under it."""
    arrive, st = {}, {rk.r: (stall or {}).get(rk.r, 0.0) for rk in ranks}
    for rk in ranks:
        s = st[rk.r]
        rk.cpu(label, rk.h, 40.0 + s)
        if kind in ("a2a", "ar"):  # DeepEP launches through pybind: no c10d host op above its kernels
            rk.cpu("record_param_comms", rk.h + 2 + s, 30.0)
        arrive[rk.r] = max(rk.d, rk.h + 15.0 + s)
    end = max(arrive.values()) + dur
    for rk in ranks:
        rk.h += st[rk.r]
        rk.corr += 1
        rk.runtime("cudaLaunchKernel", rk.h + 10, 8.0, rk.corr)
        rk.ev.append({"ph": "X", "cat": "kernel", "name": NCCL[kind], "pid": 0, "tid": 20, "ts": arrive[rk.r],
                      "dur": end - arrive[rk.r], "args": {"device": 0, "stream": 20, "correlation": rk.corr,
                                                          "External id": rk.corr}})
        rk.d = end  # the compute stream waits for the collective (wait_tensor)
        rk.h += 45.0
    return end


def simulate(k: Knobs) -> tuple[list[Rank], dict]:
    """Every rank's events, and the facts planted: collective start times per index, step windows."""
    ranks = [Rank(r, k.t0, k.rt, k.with_stack) for r in range(k.ranks)]
    for rk in ranks:
        rk.launch_us = k.launch_us
    facts = {"collective_ends": [], "steps": {}}
    for s in range(k.steps):
        n = 10 + s
        scale = 3.0 if s == k.outlier_step else 1.0
        starts: dict = {}
        region: dict = {}
        for rk in ranks:
            rk.h = max(rk.h, rk.d) + 50.0
            starts[rk.r] = rk.h
            if k.cpu_memory_events:
                for j in range(4):
                    rk.ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
                                  "pid": 100 + rk.r, "tid": 100 + rk.r, "ts": rk.h + j,
                                  "args": {"Total Reserved": 0, "Total Allocated": 8 * (j % 2), "Bytes": 8 - 16 * (j % 2),
                                           "Device Id": -1, "Device Type": 0, "Addr": 1000 + rk.r}})
            if k.alloc_on or k.flush_step is not None or k.warmup_growth:
                for _ in range(3):
                    rk.runtime("cudaMalloc", rk.h, 120.0)
                    rk.h += 125.0
            if k.async_copy:
                rk.corr += 1
                rk.runtime("cudaMemcpyAsync", rk.h, 12.0, rk.corr)
                st = max(rk.d, rk.h + 10)
                rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
                              "tid": 7, "ts": st, "dur": 300.0, "args": {"device": 0, "stream": 7, "correlation": rk.corr}})
                rk.d = st + 300.0
                rk.h += 15.0
            for i in range(k.tiny_kernels):  # many tiny ops: the host's launch rate bounds the GPU
                rk.launch("aten::add", ELEMENTWISE, 4.0, k)
            if k.cub_in_ep_namespace:
                rk.launch("aten::cumsum", CUB_LOOKALIKE, 1000.0, k)
            if k.chore is not None:
                k.chore(rk, k, facts, n)
            fwd = rk.h
            for i in range(12):  # forward
                shaped = i < k.first_call_shapes
                slow = shaped and (s == 0 or k.slow_every_step)
                if slow:  # the host caught up: the setup idles the GPU
                    rk.h = max(rk.h, rk.d)
                rk.launch("aten::mm", GEMM[k.gemm], 3000.0 * scale, k, host_us=k.first_call_ms * 1000 if slow else None,
                          args={"Input Dims": [[64, 128 * (i + 1)], [128 * (i + 1), 256]],
                                "Input type": ["c10::BFloat16", "c10::BFloat16"]} if shaped else None)
                if i == 8 and k.long_host_op_ms:  # the host fell behind; one long op, the GPU drained
                    rk.h = max(rk.h, rk.d)
                    rk.cpu("aten::split_with_sizes", rk.h, k.long_host_op_ms * 1000)
                    rk.h += k.long_host_op_ms * 1000
                rk.launch("aten::add", ELEMENTWISE, 400.0 * scale, k)
                if i == 3 and s == 0 and k.warmup_growth:  # the cache grows once, in the first step
                    rk.h = max(rk.h, rk.d)
                    for _ in range(25):
                        rk.runtime("cudaMalloc", rk.h, 3000.0)
                        rk.h += 3005.0
                if i == 3 and s == k.flush_step:  # an allocation fails: the cache is released and refilled
                    rk.h = max(rk.h, rk.d)
                    for _ in range(k.flush_frees):
                        rk.runtime("cudaFree", rk.h, 3000.0)
                        rk.h += 3005.0
                    for _ in range(9):
                        rk.runtime("cudaMalloc", rk.h, 4000.0)
                        rk.h += 4005.0
                if i == 5 and (k.sync_copies or k.host_ops_twin):
                    _sync_copies(rk, k)
                if i == 5 and (k.event_wait_ms or k.stream_wait):
                    _event_wait(rk, k, facts, n)
                copy_ms = k.blocking_copy_ms or (k.copy_once_ms if s == 2 else 0.0)
                if i == 5 and copy_ms:  # a pageable copy mid-forward: drains the queue, host stages it
                    t = max(rk.h, rk.d)
                    rk.cpu("aten::copy_", rk.h, t - rk.h + copy_ms * 1000 + 10)
                    rk.runtime("cudaMemcpy", rk.h, t - rk.h + copy_ms * 1000)
                    rk.h = t + copy_ms * 1000
                    rk.corr += 1
                    rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
                                  "pid": 0, "tid": 7, "ts": rk.h - 300.0, "dur": 250.0,
                                  "args": {"device": 0, "stream": 7, "correlation": rk.corr}})
                    rk.d = rk.h - 50.0
                    rk.h += 10.0
            if k.autograd:
                rk.cpu("DistributedDataParallel.forward", fwd - 1.0, rk.h - fwd + 1.0)
            rk.sync()  # splits to the host before the all_to_all
            if k.qcomm_ms:
                _codec(rk, k, "encode")
            region[rk.r] = rk.h
            if rk.r == k.stall_rank:
                rk.h += k.stall_ms * 1000  # nothing profiled: sleep, I/O, a lock
        facts["collective_ends"].append(_collective(ranks, "dispatch" if k.deepep else "a2a", 2500.0, k,
                                                    "deep_ep::Buffer::dispatch" if k.deepep else "nccl:all_to_all"))
        for rk in ranks if k.region_stall else []:
            rk.cpu("# running sparse arch", region[rk.r], rk.h - region[rk.r], cat="user_annotation")
        for rk in ranks if k.qcomm_ms else []:
            _codec(rk, k, "decode")
        for rk in ranks:
            for i in range(0 if k.forward_only else 12):  # backward
                rk.launch("autograd::engine::evaluate_function: MmBackward0" if k.autograd else "aten::mm",
                          GEMM[k.gemm], 4000.0 * scale, k)
                rk.launch("autograd::engine::evaluate_function: MulBackward0" if k.autograd else "aten::mul",
                          ELEMENTWISE, 500.0 * scale, k)
        for b in range(3):
            facts["collective_ends"].append(_collective(ranks, "ar", 3000.0, k, "nccl:all_reduce"))
        stall = None
        if k.thread_stall_rank is not None:  # the backward's all_to_all on the autograd thread; a side kernel
            stall = {k.thread_stall_rank: k.thread_stall_ms * 1000}
            for rk in ranks:
                rk.tid = 200 + rk.r
                rk.corr += 1
                rk.runtime("cudaLaunchKernel", rk.h, 8.0, rk.corr)
                rk.ev.append({"ph": "X", "cat": "kernel", "name": SIDE, "pid": 0, "tid": 30, "ts": rk.h + 10,
                              "dur": k.thread_stall_ms * 1000 + 10, "args": {"device": 0, "stream": 30,
                                                                               "correlation": rk.corr}})
                rk.h += 10.0
        facts["collective_ends"].append(_collective(ranks, "combine" if k.deepep else "a2a", 2000.0, k,
                                                    "deep_ep::Buffer::combine" if k.deepep else "nccl:all_to_all",
                                                    stall))
        for rk in ranks:
            rk.tid = 100 + rk.r
        for rk in ranks:
            opt = rk.h
            for i in range(0 if k.forward_only else 6):  # optimizer
                rk.launch("aten::_foreach_add_", ELEMENTWISE, 300.0 * scale, k)
            if k.autograd and not k.forward_only:
                rk.cpu("Optimizer.step#SGD.step", opt - 1.0, rk.h - opt + 1.0)
            rk.sync()  # loss.item()
            if not k.no_profiler_step:
                rk.cpu(f"ProfilerStep#{n}", starts[rk.r], rk.h - starts[rk.r], cat="user_annotation")
            facts["steps"].setdefault(n, {})[rk.r] = (rk.h - starts[rk.r]) / 1000
    for rk in ranks if k.chore is not None else []:
        k.chore(rk, k, facts, None)
    if k.late_rank is not None and k.late_by:
        _cut(ranks[k.late_rank], sorted(facts["collective_ends"])[k.late_by - 1] - 1.0)  # the k-th runs before it
    return ranks, facts


def _cut(rk: Rank, cut: float):
    """The rank's capture starts at `cut`: events that began before it are not recorded, the step then
    running is recorded from the cut (the profiler starts its step annotation when it starts)."""
    kept = []
    for e in rk.ev:
        if e["ts"] >= cut:
            kept.append(e)
        elif e["name"].startswith("ProfilerStep#") and e["ts"] + e["dur"] > cut:
            kept.append(dict(e, ts=cut + 1.0, dur=e["ts"] + e["dur"] - cut - 1.0))
    rk.ev = kept


def write(k: Knobs, folder: str, prefix: str = "planted") -> list[str]:
    if k.writer is not None:
        return k.writer(folder, prefix)
    if k.runs > 1:
        return [p for i in range(k.runs) for p in
                write(replace(k, runs=1, t0=k.t0 + 180e6 * i), folder, f"{prefix}_run{i}")]
    ranks, _ = simulate(k)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for rk in ranks:
        ev = sorted(rk.ev, key=lambda e: e["ts"])
        doc = {"schemaVersion": 1, "deviceProperties": [dict(k.device, id=0)],
               "distributedInfo": {"backend": "nccl", "rank": rk.r, "world_size": k.ranks},
               "traceEvents": ev}
        p = os.path.join(folder, f"{prefix}_rank{rk.r}.pt.trace.json.gz")
        with gzip.open(p, "wt") as f:
            json.dump(doc, f)
        paths.append(p)
    return paths
