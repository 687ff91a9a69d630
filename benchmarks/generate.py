"""Synthetic Kineto trace sets for the benchmarks: N ranks × a target size, written as .json.gz.

The event mix and layout follow the real traces in shared/fixtures/real (Kineto's pretty-printed
Chrome JSON, ~240 bytes/event): cpu_op chains (with `Input Dims` where shapes are recorded), cuda_runtime
launches with correlation ids, kernels on a compute stream, `ac2g` flow pairs, memcpy/memset, user
annotations `ProfilerStep#N`, NCCL kernels (`ncclDevKernel_*` and the pre-2.19 `ncclKernel_*`) with the
collective args Kineto records, `[memory]` instant events, `M` metadata, and a header with
deviceProperties and distributedInfo (rank, world_size, pg_config with DeviceMesh groups).

A step is an FSDP+TP transformer step: forward layers (all-gather prefetch on stream 20, TP all-reduce
on stream 24), backward layers on the autograd thread (reduce-scatter on stream 20), an optimizer, and a
host sync. GPU time is simulated with per-stream queues, so overlap numbers are plausible. The size is
reached by scaling layers × microbatches, with a fixed number of steps.

    python -m benchmarks.generate --ranks 8 --mb 100 --out benchmarks/data/r8x100
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
import zlib
from concurrent.futures import ProcessPoolExecutor

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_BWD = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
LN = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
FLASH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
FLASH_BWD = "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false>(pytorch_flash::Flash_bwd_params)"
ELTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
SILU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#5}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, bool, float*, float*)"
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
COMPUTE, DP, TP = 7, 20, 24  # streams
GIB = 1 << 30


def _f(x: float) -> str:
    return f"{x:.3f}"


KINETO_LIST_MAX = 30  # Kineto's kTruncatLength: "Process Group Ranks" of a larger group is its first 30, then "..."


class _Rank:
    """Writes one rank's events into `out` (a list of str), simulating host and GPU clocks."""

    def __init__(self, rank: int, world: int, tp: int, seed: int):
        self.rank, self.world, self.tp = rank, world, tp
        self.rng = random.Random(seed * 100_003 + rank)
        self.slow = 1.06 if rank == world - 1 else 1.0  # a straggler, for the skew metrics
        self.pid, self.main, self.bwd = 1000 + rank, 1000 + rank, 2000 + rank
        self.t = 4_458_676_000_000.0 + 1000.0 * (rank // 8) + self.rng.random() * 50  # µs; per-host clock offset
        self.free = {COMPUTE: self.t, DP: self.t, TP: self.t}
        self.ext, self.corr, self.ev_idx = 40_000, 1_200_000 + 37 * rank, 0  # CUPTI ids count from process start
        self.alloc, self.reserved = 30 * GIB + rank * 4096, 32 * GIB
        self.out: list[str] = []
        self.tp_ranks = [rank - rank % tp + i for i in range(tp)]
        self.dp_ranks = list(range(rank % tp, world, tp))

    # -- events ----------------------------------------------------------------------------------
    def _x(self, cat, name, tid, ts, dur, args, pid=None):
        self.out.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {self.pid if pid is None else pid}, '
            f'"tid": {tid},\n    "ts": {_f(ts)}, "dur": {_f(dur)},\n    "args": {{\n      {args}\n    }}\n  }}'
        )

    def _cpu(self, name, tid, ts, dur, shapes):
        self.ext += 1
        self.ev_idx += 1
        a = f'"External id": {self.ext},"Record function id": {self.ext}, "Ev Idx": {self.ev_idx}'
        if shapes:
            a += (', "Input Dims": [[8, 4096, 4096], [4096, 4096], []], "Input Strides": [[16777216, 4096, 1], [1, 4096], []],'
                  ' "Input type": ["c10::BFloat16", "c10::BFloat16", ""], "Concrete Inputs": ["", "", ""]')
        self._x("cpu_op", name, tid, ts, dur, a)

    def _memory(self, tid, ts, nbytes, device_type=1):
        self.alloc += nbytes
        self.reserved = max(self.reserved, (self.alloc + (2 << 20)) // (2 << 20) * (2 << 20))
        self.out.append(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n    "pid": {self.pid}, '
            f'"tid": {tid},\n    "ts": {_f(ts)},\n    "args": {{\n      "Total Reserved": {self.reserved}, "Total Allocated": '
            f'{self.alloc}, "Bytes": {nbytes}, "Addr": {140000000000000 + self.ext * 512}, "Device Id": {self.rank % 8}, '
            f'"Device Type": {device_type}\n    }}\n  }}'
        )

    def _flow(self, ph, corr, pid, tid, ts):
        bp = ', "bp": "e"' if ph == "f" else ""
        self.out.append(f'  {{\n    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {_f(ts)},\n'
                        f'    "cat": "ac2g", "name": "ac2g"{bp}\n  }}')

    def _runtime(self, name, tid, ts, dur, cbid=211):
        self.corr += 1
        a = f'"External id": {self.ext}, "cbid": {cbid}, "correlation": {self.corr}'
        self._x("cuda_runtime", name, tid, ts, dur, a)
        return self.corr

    # -- ops --------------------------------------------------------------------------------------
    def op(self, chain, tid, kernel=None, kdur=0.0, stream=COMPUTE, after=0.0, comm=None, alloc=0, cat="kernel"):
        """A chain of nested cpu_ops whose innermost launches one kernel (or memcpy/memset). Returns its end."""
        r = self.rng.random
        t0 = self.t
        self.t += 1.5 * len(chain) + 2 * r()
        if alloc:
            self._memory(tid, self.t, alloc)
            self.t += 0.5
        if comm:  # NCCL: record the event, wait on it from the comm stream
            self._runtime("cudaEventRecord", tid, self.t, 1.2 + r(), 210)
            self._runtime("cudaStreamWaitEvent", tid, self.t + 2.5, 1.0 + r(), 209)
            self.t += 5
        kend = self.t
        if kernel:
            rt_name = {"gpu_memcpy": "cudaMemcpyAsync", "gpu_memset": "cudaMemsetAsync"}.get(cat, "cudaLaunchKernel")
            rt_dur = 3.5 + 4 * r()
            corr = self._runtime(rt_name, tid, self.t, rt_dur)
            self._flow("s", corr, self.pid, tid, self.t + 0.5)
            ks = max(self.t + 6.0, self.free[stream], after)
            kd = kdur * self.slow * (0.9 + 0.2 * r())
            kend = ks + kd
            self.free[stream] = kend
            a = (f'"External id": {self.ext}, "queued": 0, "device": {self.rank % 8}, "context": 1, "stream": {stream}, '
                 f'"correlation": {corr}')
            if cat == "kernel":
                a += (', "registers per thread": 128, "shared memory": 65536, "blocks per SM": 1.2, "warps per SM": 9.6, '
                      '"grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 12')
            else:
                a += f', "bytes": {alloc or 4194304}, "memory bandwidth (GB/s)": {1200 + 100 * r():.3f}'
            if comm:
                a += ", " + comm
            self._x(cat, kernel, stream, ks, kd, a, pid=0)
            self._flow("f", corr, 0, stream, ks)
            self.t += rt_dur + 1.0
        self.t += 1.0 * len(chain) + r()
        end = self.t
        for i, name in enumerate(chain):
            leaf = i == len(chain) - 1 and name.startswith("aten::")
            self._cpu(name, tid, t0 + 0.7 * i, end - t0 - 1.2 * i, shapes=leaf)
        return kend

    def collective(self, kind, kernel, stream, pg, ranks, nelems, tid, after=0.0):
        size = self.world if ranks == "[...]" else len(ranks)
        if not isinstance(ranks, str) and size > KINETO_LIST_MAX:  # as Kineto writes a long list (format_list)
            ranks = "[" + ", ".join(map(str, ranks[:KINETO_LIST_MAX])) + ", ...]"
        out_n = nelems * size if kind == "allgather" else nelems
        in_n = nelems * size if kind == "reducescatter" else nelems
        args = (f'"Collective name": "{kind}", "In msg nelems": {in_n}, "Out msg nelems": {out_n}, "Group size": {size}, '
                f'"dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", "Process Group Name": "{pg[0]}", '
                f'"Process Group Description": "{pg[1]}", "Process Group Ranks": "{ranks}"')
        bw = 150e3 if stream == TP else 40e3  # bytes/µs
        dur = 12 + 2 * in_n / bw
        c10d = {"allgather": "c10d::_allgather_base_", "reducescatter": "c10d::_reduce_scatter_base_",
                "allreduce": "c10d::allreduce_"}[kind]
        self.ext += 1
        label = {"allgather": "_allgather_base", "reducescatter": "_reduce_scatter_base", "allreduce": "all_reduce"}[kind]
        self._x("user_annotation", "nccl:" + label, tid, self.t + 1, 3.0, f'"External id": {self.ext}, "Ev Idx": {self.ev_idx}')
        # The comm stream waits on the producer of its input (cudaStreamWaitEvent): TP all-reduces and
        # reduce-scatters follow compute; FSDP's all-gather prefetch does not.
        dep = after if kind == "allgather" else max(after, self.free[COMPUTE])
        return self.op((c10d, "record_param_comms"), tid, kernel, dur, stream, dep, comm=args)

    def step(self, n: int, layers: int, mbs: int) -> None:
        start = self.t
        unit = max(1, (40 << 30) // (1184 * layers * mbs))  # activations peak ~40 GiB over the base
        tp_pg, dp_pg = ("2", "mesh_tp"), ("1", "mesh_dp")
        self.op(("aten::to", "aten::_to_copy", "aten::copy_"), self.main, "Memcpy HtoD (Pinned -> Device)", 40,
                cat="gpu_memcpy", alloc=8 * unit)
        self.op(("aten::zero_", "aten::fill_"), self.main, "Memset (Device)", 3, cat="gpu_memset")
        ag_done = {0: self.collective("allgather", AG, DP, dp_pg, self.dp_ranks, 25_165_824, self.main)}
        acts = []
        for mb in range(mbs):
            for layer in range(layers):
                if mb == 0 and layer + 1 < layers:
                    ag_done[layer + 1] = self.collective("allgather", AG, DP, dp_pg, self.dp_ranks, 25_165_824,
                                                         self.main)
                dep = ag_done.get(layer, 0.0) if mb == 0 else 0.0
                self.op(("aten::layer_norm", "aten::native_layer_norm"), self.main, LN, 25, after=dep, alloc=64 * unit)
                self.op(("aten::linear", "aten::matmul", "aten::mm"), self.main, GEMM, 520, alloc=192 * unit)
                self.op(("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention"),
                        self.main, FLASH, 610, alloc=64 * unit)
                self.op(("aten::linear", "aten::matmul", "aten::mm"), self.main, GEMM, 170, alloc=64 * unit)
                ar = self.collective("allreduce", AR, TP, tp_pg, self.tp_ranks, 33_554_432, self.main)
                self.op(("aten::add",), self.main, ELTWISE, 22, after=ar, alloc=64 * unit)
                self.op(("aten::linear", "aten::matmul", "aten::mm"), self.main, GEMM, 690, alloc=224 * unit)
                self.op(("aten::silu",), self.main, SILU, 30, alloc=224 * unit)
                self.op(("aten::mul",), self.main, ELTWISE, 30, alloc=224 * unit)
                self.op(("aten::linear", "aten::matmul", "aten::mm"), self.main, GEMM, 690, alloc=64 * unit)
                ar = self.collective("allreduce", AR, TP, tp_pg, self.tp_ranks, 33_554_432, self.main)
                self.op(("aten::add",), self.main, ELTWISE, 22, after=ar, alloc=64 * unit)
                acts.append(1184)
        self.op(("aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax"), self.main, ELTWISE, 300,
                alloc=512 * unit)
        self.t += 20
        for mb in range(mbs):
            for layer in reversed(range(layers)):
                t = self.bwd
                pre = "autograd::engine::evaluate_function: "
                self.op((pre + "MmBackward0", "MmBackward0", "aten::mm"), t, GEMM_BWD, 1380)
                self.op((pre + "MulBackward0", "MulBackward0", "aten::mul"), t, ELTWISE, 60)
                self.op((pre + "SiluBackward0", "SiluBackward0", "aten::silu_backward"), t, SILU, 60)
                self.op((pre + "MmBackward0", "MmBackward0", "aten::mm"), t, GEMM_BWD, 1380)
                ar = self.collective("allreduce", AR, TP, tp_pg, self.tp_ranks, 33_554_432, t)
                self.op((pre + "FlashAttentionBackward0", "aten::_scaled_dot_product_flash_attention_backward"),
                        t, FLASH_BWD, 1500, after=ar)
                last = self.op((pre + "MmBackward0", "MmBackward0", "aten::mm"), t, GEMM_BWD, 700)
                self.op((pre + "NativeLayerNormBackward0", "aten::native_layer_norm_backward"), t, LN, 50)
                if acts:
                    self._memory(t, self.t, -acts.pop() * unit)
                if mb == mbs - 1:
                    self.collective("reducescatter", RS, DP, dp_pg, self.dp_ranks, 25_165_824, t, after=last)
        self.collective("allreduce", AR_OLD, DP, ("0", "default_pg"), list(range(self.world)),
                        1, self.main)
        self.ext += 1
        opt_t0 = self.t
        for _ in range(4):
            self.op(("aten::_fused_adamw_",), self.main, ADAM, 900)
        self._x("user_annotation", "Optimizer.step#AdamW.step", self.main, opt_t0, self.t - opt_t0,
                f'"External id": {self.ext}, "Ev Idx": {self.ev_idx}')
        gpu_end = max(self.free.values())  # .item(): the host waits for the device
        self._runtime("cudaStreamSynchronize", self.main, self.t, max(1.0, gpu_end - self.t) + 3, 131)
        self.t = max(self.t, gpu_end) + 10
        self._memory(self.main, self.t - 5, -520 * unit)  # the batch and the loss's buffers
        self.ext += 1
        self._x("user_annotation", f"ProfilerStep#{n}", self.main, start - 5, self.t - start + 5,
                f'"External id": {self.ext}, "Ev Idx": {self.ev_idx}')
        self.t += 30


def header(rank: int, world: int, tp: int) -> bytes:
    dev = {"id": rank % 8, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85017214976, "computeMajor": 9,
           "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
           "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132}
    tp_ranks = [rank - rank % tp + i for i in range(tp)]
    dp_ranks = list(range(rank % tp, world, tp))
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": world, "ranks": list(range(world))},
           {"pg_name": "1", "pg_desc": "mesh_dp", "backend_config": "cuda:nccl", "pg_size": len(dp_ranks), "ranks": dp_ranks},
           {"pg_name": "2", "pg_desc": "mesh_tp", "backend_config": "cuda:nccl", "pg_size": tp, "ranks": tp_ranks}]
    head = {"schemaVersion": 1, "deviceProperties": [dict(dev, id=i) for i in range(8)],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": 3,
                                "pg_config": pgs, "nccl_version": "2.21.5"},
            "record_shapes": 1, "with_stack": 0, "profile_memory": 1}
    text = json.dumps(head, indent=2)
    return (text[: text.rfind("}")].rstrip() + ',\n  "traceEvents": [\n').encode()


def _meta(r: _Rank) -> list[str]:
    ev = [(r.pid, 0, "process_name", "python3"), (r.pid, r.main, "thread_name", "thread 1 (python3)"),
          (r.pid, r.bwd, "thread_name", "pt_autograd_0"), (0, 0, "process_name", f"cuda:{r.rank % 8}")]
    ev += [(0, s, "thread_name", f"stream {s}") for s in (COMPUTE, DP, TP)]
    return [f'  {{\n    "name": "{n}", "ph": "M", "ts": {_f(r.t)}, "pid": {p}, "tid": {t},\n    "args": {{\n      "name": "{v}"\n    }}\n  }}'
            for p, t, n, v in ev]


def _block_bytes(world: int, tp: int) -> float:
    """Bytes of one step per (layer × microbatch), measured on a small step."""
    sizes = []
    for layers in (1, 3):
        r = _Rank(0, world, tp, 0)
        r.step(0, layers, 1)
        sizes.append(sum(len(s) + 2 for s in r.out))
    return (sizes[1] - sizes[0]) / 2


def write_rank(path: str, rank: int, world: int, target_bytes: int, steps: int = 4, seed: int = 0,
               level: int = 1) -> int:
    """One rank's trace of about `target_bytes` (decompressed); returns the exact decompressed size."""
    tp = min(8, world)
    per_block = _block_bytes(world, tp)
    blocks = max(1, round(target_bytes / steps / per_block))
    mbs = math.ceil(blocks / 48)
    layers = max(1, round(blocks / mbs))
    if blocks > 4:  # ids and timestamps get longer at scale: size one real step and rescale (within ~1 %)
        probe = _Rank(rank, world, tp, seed)
        probe.step(100, layers, mbs)
        per_block = sum(len(s) + 2 for s in probe.out) / (layers * mbs)
        del probe
        layers = max(1, round(target_bytes / steps / per_block / mbs))
    r = _Rank(rank, world, tp, seed)
    z = zlib.compressobj(level, zlib.DEFLATED, 31)
    total = 0
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        def put(b: bytes):
            nonlocal total
            total += len(b)
            f.write(z.compress(b))

        put(header(rank, world, tp))
        r.out = _meta(r)
        first = True
        for n in range(steps):
            r.step(100 + n, layers, mbs)
            chunk = ",\n".join(r.out)
            put(((",\n" if not first else "") + chunk).encode())
            first = False
            r.out = []
        put(b'\n  ],\n  "traceName": "%s",\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1700000000000000000\n}\n'
            % os.path.basename(path).encode())
        f.write(z.flush())
    os.replace(tmp, path)
    return total


def _one(args):
    return write_rank(*args)


def write_set(out_dir: str, ranks: int, mb: float, *, steps: int = 4, seed: int = 0, jobs: int | None = None,
              world: int | None = None) -> list[str]:
    """`ranks` trace files of about `mb` MB each under out_dir; reused when out_dir already holds this set."""
    os.makedirs(out_dir, exist_ok=True)
    spec = {"ranks": ranks, "mb": mb, "steps": steps, "seed": seed, "world": world or ranks, "version": 2}
    stamp = os.path.join(out_dir, "generated.spec")  # not *.json: discovery would take it for a trace
    paths = [os.path.join(out_dir, f"rank{r}.pt.trace.json.gz") for r in range(ranks)]
    try:
        with open(stamp) as f:
            saved = json.load(f)
        saved.pop("decompressed_bytes", None)
        if saved == spec and all(os.path.exists(p) for p in paths):
            return paths
    except (OSError, ValueError):
        pass
    target = int(mb * 1e6)
    work = [(p, r, world or ranks, target, steps, seed) for r, p in enumerate(paths)]
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and ranks > 1:
        with ProcessPoolExecutor(min(jobs, ranks)) as ex:
            sizes = list(ex.map(_one, work))
    else:
        sizes = [_one(w) for w in work]
    spec["decompressed_bytes"] = sizes
    with open(stamp, "w") as f:
        json.dump(spec, f)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=100, help="decompressed MB per rank")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    t = time.perf_counter()
    paths = write_set(a.out, a.ranks, a.mb, steps=a.steps, seed=a.seed)
    size = sum(os.path.getsize(p) for p in paths)
    print(f"{len(paths)} traces, {size / 1e6:.1f} MB gzipped, in {time.perf_counter() - t:.1f} s -> {a.out}")


if __name__ == "__main__":
    main()
