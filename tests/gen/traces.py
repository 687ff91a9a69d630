"""Generators of GPU traces of stacks no public trace shows: DeepEP expert parallelism and torch
symmetric-memory / custom all-reduce tensor parallelism, with the exact answer computed independently.

Kernel and host-op names are the public projects' own:
- DeepEP (deepseek-ai/DeepEP csrc/kernels/intranode.cu, internode.cu, internode_ll.cu): kernels
  `deep_ep::{intranode,internode,internode_ll}::{notify_dispatch,dispatch,combine,...}`, launched from
  Python through pybind (no `record_param_comms` / `nccl:*` host op above them: only the name says
  what they are);
- torch symmetric memory (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu): host op
  `symm_mem::multimem_all_reduce_` / `symm_mem::one_shot_all_reduce` / `symm_mem::two_shot_all_reduce_`,
  kernels `multimem_all_reduce_kernel`, `one_shot_all_reduce_kernel`, `two_shot_all_reduce_kernel`;
- vLLM / SGLang custom all-reduce (vllm csrc/custom_all_reduce.cuh): host op `vllm::all_reduce`, kernel
  `vllm::cross_device_reduce_1stage` / `_2stage`;
- GEMMs: cuBLAS sm90 bf16 (`sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_...`, bf16 inputs, fp32
  accumulate) and nvjet (sm100).

The answer is computed from a per-microsecond occupancy bitmap of the placed kernels (not from interval
unions, llmdiag's method), over each step's device window (first kernel start to last kernel end).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tests.gen.builder import TraceBuilder

BF16_GEMM_SM90 = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
                  "segment_k_off_kernel__5x_cublas")
NVJET_GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_TNT"
DEEPEP = {
    "intranode": ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, int, "
                  "int const*, int*, int, void**, int**, int)",
                  "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*, float*, int*, "
                  "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, "
                  "int, int, int, int, void**, int, int, int)",
                  "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, "
                  "__nv_bfloat16 const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, "
                  "int const*, int const*, void**, int, int, int, int, int, int, int)"),
    "internode": ("void deep_ep::internode::notify_dispatch<true, 8>(int const*, int*, int, int const*, int*, int, "
                  "int const*, int*, int, bool const*, int, int, int, int, void*, int*, int, void**, int**, int, "
                  "int, int, int*, int*, int*, int*, int*)",
                  "void deep_ep::internode::dispatch<false, 4, true, 8, 2, 6144, 7168>(int4*, float*, long*, "
                  "float*, deep_ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, "
                  "int*, int*, int*, int*, int const*, int const*, int const*, int const*, bool const*, int, int, "
                  "int, int, int, void*, int, int, void**, int, int, int, int)",
                  "void deep_ep::internode::combine<true, 4, 8, 2, 6144, 7168>(int4*, float*, bool const*, "
                  "int4 const*, float const*, float const*, int const*, int const*, int const*, "
                  "deep_ep::internode::SourceMeta const*, int const*, int const*, int, int, int, void*, int, int, "
                  "void**, int, int, int, int)"),
    "low_latency": ("void deep_ep::internode_ll::clean_low_latency_buffer<128>(int*, int, int*, int)",
                    "void deep_ep::internode_ll::dispatch<true, 3, 7168>(void*, float*, int*, long*, int*, int*, "
                    "void*, long*, void*, void const*, long const*, int*, int*, int, int, int, int, int, int, int)",
                    "void deep_ep::internode_ll::combine<3, 7168, 4>(void*, void*, long*, void const*, "
                    "long const*, float const*, int const*, int const*, int*, int*, int, int, int, int, int, int, "
                    "int, int, bool, bool, bool)"),
}
TP_ALLREDUCE = {  # variant -> (host op, kernel)
    "multimem": ("symm_mem::multimem_all_reduce_",
                 "void c10d::symmetric_memory::(anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>"
                 "(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long, unsigned long)"),
    "one_shot": ("symm_mem::one_shot_all_reduce",
                 "void c10d::symmetric_memory::(anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>"
                 "(c10::BFloat16**, c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long, "
                 "unsigned long)"),
    "two_shot": ("symm_mem::two_shot_all_reduce_",
                 "void c10d::symmetric_memory::(anonymous namespace)::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8>"
                 "(c10::BFloat16**, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)"),
    "vllm_custom": ("vllm::all_reduce",
                    "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
                    "vllm::Signal*, __nv_bfloat16*, int, int)"),
}


@dataclass
class Expected:
    """Exact answer per step (µs), from the occupancy bitmap."""

    step_us: list[int] = field(default_factory=list)
    compute_us: list[int] = field(default_factory=list)
    comm_us: list[int] = field(default_factory=list)
    overlapped_us: list[int] = field(default_factory=list)

    @property
    def overlap_ratio(self) -> float | None:
        return sum(self.overlapped_us) / sum(self.comm_us) if sum(self.comm_us) else None


@dataclass
class _Placed:
    compute: list = field(default_factory=list)  # (start, end) µs
    comm: list = field(default_factory=list)


def _answer(steps: list[_Placed]) -> Expected:
    ex = Expected()
    for p in steps:
        lo = min(s for s, _ in p.compute + p.comm)
        hi = max(e for _, e in p.compute + p.comm)
        comp = np.zeros(hi - lo, bool)
        comm = np.zeros(hi - lo, bool)
        for s, e in p.compute:
            comp[s - lo:e - lo] = True
        for s, e in p.comm:
            comm[s - lo:e - lo] = True
        ex.step_us.append(hi - lo)
        ex.compute_us.append(int(comp.sum()))
        ex.comm_us.append(int(comm.sum()))
        ex.overlapped_us.append(int((comp & comm).sum()))
    return ex


def deepep_ep_rank(rank: int = 0, world_size: int = 16, mode: str = "internode", steps: int = 2, layers: int = 3,
                   gemm_us: int = 400, dispatch_us: int = 300, combine_us: int = 250, overlap_us: int = 100,
                   step_us: int = 10_000) -> tuple[TraceBuilder, Expected]:
    """One rank of a DeepEP expert-parallel MoE training step.

    Per layer (forward, k = layer offset): notify_dispatch (20 µs) then dispatch on the comm stream, the expert
    GEMM on the compute stream starting `overlap_us` before the dispatch ends (a previous micro-chunk's
    experts overlap it), then combine starting as the GEMM ends. The kernels are launched with no
    communication host op above them, as DeepEP's pybind calls are."""
    notify, dispatch, combine = DEEPEP[mode]
    b = TraceBuilder(rank=rank, world_size=world_size, device_properties=[{"name": "NVIDIA H800",
                                                                           "computeMajor": 9, "computeMinor": 0}])
    placed = []
    for k in range(steps):
        k0 = k * step_us
        b.step(k + 1, k0, k0 + step_us)
        p = _Placed()
        t = k0 + 200
        for layer in range(layers):
            b.cpu_op("deep_ep::Buffer::dispatch", t - 150, 20)  # a python-side label, not a comm op
            b.kernel(notify, t, 20, stream=30, launch_at=t - 140)
            p.comm.append((t, t + 20))
            d0 = t + 20
            b.kernel(dispatch, d0, dispatch_us, stream=30, launch_at=t - 139)
            p.comm.append((d0, d0 + dispatch_us))
            g0 = d0 + dispatch_us - overlap_us
            b.kernel(BF16_GEMM_SM90, g0, gemm_us, stream=7, launch_at=t - 130)
            p.compute.append((g0, g0 + gemm_us))
            c0 = g0 + gemm_us
            b.kernel(combine, c0, combine_us, stream=30, launch_at=t - 120)
            p.comm.append((c0, c0 + combine_us))
            t = c0 + combine_us + 200
        placed.append(p)
    return b, _answer(placed)


def symm_mem_tp_rank(rank: int = 0, world_size: int = 8, variant: str = "multimem", steps: int = 2, layers: int = 4,
                     gemm_us: int = 300, allreduce_us: int = 80, gemm_name: str = BF16_GEMM_SM90,
                     step_us: int = 10_000) -> tuple[TraceBuilder, Expected]:
    """One rank of tensor parallelism whose all-reduce is torch symmetric memory (or vLLM's custom one).

    Per layer: a GEMM, then the all-reduce of its output under its host op (`symm_mem::...` or
    `vllm::all_reduce`), sequential on one stream: no overlap, every µs of all-reduce exposed."""
    op, kernel = TP_ALLREDUCE[variant]
    b = TraceBuilder(rank=rank, world_size=world_size, device_properties=[{"name": "NVIDIA B200",
                                                                           "computeMajor": 10, "computeMinor": 0}])
    placed = []
    for k in range(steps):
        k0 = k * step_us
        b.step(k + 1, k0, k0 + step_us)
        p = _Placed()
        t = k0 + 100
        for layer in range(layers):
            b.cpu_op("aten::mm", t - 60, 10, args={"Input type": ["c10::BFloat16", "c10::BFloat16"]})
            b.kernel(gemm_name, t, gemm_us, stream=7, launch_at=t - 55)
            p.compute.append((t, t + gemm_us))
            a0 = t + gemm_us
            b.cpu_op(op, t - 40, 20, args={"Input type": ["c10::BFloat16", "", ""]})
            b.kernel(kernel, a0, allreduce_us, stream=7, launch_at=t - 30)
            p.comm.append((a0, a0 + allreduce_us))
            t = a0 + allreduce_us + 50
        placed.append(p)
    return b, _answer(placed)
