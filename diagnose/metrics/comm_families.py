"""The maintained table of communication kernel-name families, for kernels no host op explains.

Classification order (docs/metrics.md): (1) a kernel launched under a host communication op is
communication, its kind from that op (host_ops.py); (2) this table; (3) the user's `--comm-regex`.
A kernel matching none of them whose name still looks like communication is reported once, naming
`--comm-regex`. Every pattern is a plain alternation of literals (no nested or unbounded quantifier
around a wildcard), and names are cut to NAME_CAP characters before matching, so classification is
linear in the name length whatever a trace holds (issue #17.5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_CAP = 4096  # characters of a name read for matching: every family's token sits in the head


@dataclass(frozen=True)
class Family:
    name: str
    pattern: re.Pattern
    source: str  # where the names come from
    kind: str | None  # collective kind every member performs, None when the name says it (NCCL) or varies


def _rx(*alternatives: str) -> re.Pattern:
    return re.compile("|".join(alternatives))


FAMILIES: tuple[Family, ...] = (
    Family("nccl", _rx(r"^nccl\w{0,64}[Kk]ernel", r"^ncclDevKernel", r"^nccl:", r"^void ncclKernel"),
           "NVIDIA/nccl src/device (ncclKernel_* before 2.19, ncclDevKernel_* since)", None),
    Family("rccl", _rx(r"^rccl", r"^void rccl"), "ROCm/rccl (RCCL also names kernels ncclDevKernel_Generic)", None),
    Family("msccl", _rx(r"^msccl", r"mscclpp::", r"^mscclKernel"),
           "microsoft/msccl and microsoft/mscclpp kernels", None),
    Family("deepep-dispatch", _rx(r"deep_ep::(?:intranode|internode|internode_ll)::(?:notify_dispatch|"
                                  r"cached_notify_dispatch|dispatch|clean_low_latency_buffer)",
                                  r"dpsk::ep::\w+::\w*dispatch"),
           "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu", "alltoall"),
    Family("deepep-combine", _rx(r"deep_ep::(?:intranode|internode|internode_ll)::(?:cached_notify_combine|"
                                 r"cached_notify|combine)", r"dpsk::ep::\w+::\w*combine"),
           "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu", "alltoall"),
    Family("symm-mem-allreduce", _rx(r"multimem_all_reduce_kernel", r"multimem_one_shot_all_reduce_kernel",
                                     r"multimem_one_shot_reduce_kernel", r"one_shot_all_reduce_kernel",
                                     r"two_shot_all_reduce_kernel"),
           "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu", "allreduce"),
    Family("symm-mem-allgather", _rx(r"multimem_all_gather_kernel"),
           "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu", "allgather"),
    Family("custom-allreduce", _rx(r"cross_device_reduce_1stage", r"cross_device_reduce_2stage"),
           "vllm-project/vllm csrc/custom_all_reduce.cuh (also sgl-kernel, SGLang)", "allreduce"),
    Family("trtllm-allreduce", _rx(r"oneShotAllReduceKernel", r"twoShotAllReduceKernel",
                                   r"tensorrt_llm::kernels::\w*[Aa]llreduce"),
           "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu", "allreduce"),
    Family("nvshmem", _rx(r"nvshmem"), "NVIDIA NVSHMEM device library (nvshmemi_* / nvshmem_* kernels)", None),
    Family("te-userbuffers", _rx(r"userbuffers_", r"kuserbuffers_"),
           "NVIDIA/TransformerEngine common/comm_gemm_overlap/userbuffers/userbuffers.cu", None),
)
# Tokens a communication kernel's name tends to carry; a kernel holding one that matched no family is
# reported (it may be a library this table does not know yet).
_LOOKS_LIKE = ("allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter",
               "alltoall", "all_to_all", "sendrecv", "send_recv", "multimem", "one_shot", "two_shot", "_p2p",
               "p2p_", "collective", "nvshmem", "userbuffers", "dispatch_combine")


def family_of(name: str) -> Family | None:
    head = name[:NAME_CAP]
    # "void " and a return type may precede a namespace: the search is unanchored but each pattern is a
    # literal (plus \w runs), so it stays linear.
    for f in FAMILIES:
        if f.pattern.search(head):
            return f
    return None


def looks_like_comm(name: str) -> bool:
    low = name[:NAME_CAP].lower()
    return any(tok in low for tok in _LOOKS_LIKE)
