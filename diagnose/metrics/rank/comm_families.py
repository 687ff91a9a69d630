"""The maintained table of communication kernel-name families, for kernels no host op explains.

Classification order (docs/metrics.md): (1) a kernel launched under a host communication op is
communication, its kind from that op (host_ops.py); (2) this table; (3) the user's `--comm-regex`.
A kernel matching none of them whose name still looks like communication is reported once, naming
`--comm-regex`. Every pattern is a plain alternation of literals (no nested or unbounded quantifier
around a wildcard), and names are cut to NAME_CAP characters before matching, so classification is
linear in the name length whatever a trace holds (issue #17.5).
"""

from __future__ import annotations

import functools
import re

from llmdiag.diagnose.model.dc import dataclass

NAME_CAP = 4096  # characters of a name read for matching: every family's token sits in the head


@dataclass(frozen=True)
class Family:
    """A family of communication kernel names (NCCL, gloo, ...): the pattern that tells its members, its kind."""

    name: str
    regex: str  # compiled on first use (`pattern`): most traces never search most families (issue #30)
    source: str  # where the names come from
    kind: str | None  # collective kind every member performs, None when the name says it (NCCL) or varies
    needles: tuple[str, ...]  # substrings one of which every match of `pattern` contains (its prefilter)

    @property
    def pattern(self) -> re.Pattern:
        return re.compile(self.regex)  # re's own cache keeps it compiled after the first search


def _rx(*alternatives: str) -> str:
    return "|".join(alternatives)


FAMILIES: tuple[Family, ...] = (
    Family("nccl", _rx(r"^nccl\w{0,64}[Kk]ernel", r"^ncclDevKernel", r"^nccl:", r"^void ncclKernel"),
           "NVIDIA/nccl src/device (ncclKernel_* before 2.19, ncclDevKernel_* since)", None, ("nccl",)),
    Family("rccl", _rx(r"^rccl", r"^void rccl"), "ROCm/rccl (RCCL also names kernels ncclDevKernel_Generic)", None,
           ("rccl",)),
    Family("msccl", _rx(r"^msccl", r"mscclpp::", r"^mscclKernel"),
           "microsoft/msccl and microsoft/mscclpp kernels", None, ("msccl",)),
    # DeepEP: every kernel of its exchange namespaces moves tokens or counts between ranks (the notify kernels
    # exchange per-rank counts through NVLink/RDMA buffers), `cached_notify*` included; only the layout
    # kernel (a local count) and v2's epilogues (a local copy out of / reduction into the receive buffer) are
    # compute. The namespaces: v1 `deep_ep::{intranode,internode,internode_ll}`, v2 `deep_ep::{elastic,ep,
    # legacy}`, and the same kernels built under `dpsk::ep::<ns>::` (seen in users' traces, issue #27.6). A
    # name that merely contains "dispatch"/"combine" outside these namespaces (a MoE token permute such as
    # `moe_dispatch_permute`, Hybrid-EP's `permute` kernels) is compute.
    Family("deepep-combine", _rx(r"deep_ep::(?:intranode|internode|internode_ll|legacy|elastic|ep)::(?:"
                                 r"cached_notify_combine|cached_notify\b|combine(?!_reduce_epilogue)|hybrid_combine"
                                 r"(?!_reduce_epilogue))",
                                 r"(?<!\w)dpsk::ep::(?!layout::)(?:\w{1,64}::)?(?:cached_notify\b|"
                                 r"\w{0,64}combine(?!_reduce_epilogue))"),
           "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu, elastic/combine.hpp, "
           "ep/combine.hpp", "alltoall", ("deep_ep::", "dpsk::ep::")),
    Family("deepep-dispatch", _rx(r"deep_ep::(?:intranode|internode|internode_ll|legacy|elastic|ep)::(?:notify_dispatch|"
                                  r"cached_notify_dispatch|dispatch(?!_copy_epilogue)|hybrid_dispatch(?!_copy_epilogue)|"
                                  r"clean_low_latency_buffer)",
                                  r"(?<!\w)dpsk::ep::(?!layout::)(?:\w{1,64}::)?(?:clean_low_latency_buffer|\w{0,64}dispatch"
                                  r"(?!_copy_epilogue))"),
           "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu, elastic/dispatch.hpp, "
           "ep/dispatch.hpp", "alltoall", ("deep_ep::", "dpsk::ep::")),
    Family("deepep-barrier", _rx(r"deep_ep::(?:intranode|internode|elastic|ep)::barrier",
                                 r"(?<!\w)dpsk::ep::(?:\w{1,64}::)?barrier"),
           "deepseek-ai/DeepEP csrc/kernels/intranode.cu, elastic/barrier.hpp (a barrier across the EP ranks)",
           "barrier", ("deep_ep::", "dpsk::ep::")),
    Family("deepep-eplb", _rx(r"deep_ep::ep::lb_(?:prefetch_weights|reduce_grads)",
                              r"(?<!\w)dpsk::ep::(?:\w{1,64}::)?lb_(?:prefetch_weights|reduce_grads)"),
           "deepseek-ai/DeepEP csrc/kernels/ep/{prefetch_weights,reduce_grads}.hpp (redundant experts' weights "
           "fetched from, and gradients reduced to, their owner ranks over NVLink)", None,
           ("deep_ep::ep::lb_", "dpsk::ep::")),
    Family("symm-mem-allreduce", _rx(r"multimem_all_reduce_kernel", r"multimem_one_shot_all_reduce_kernel",
                                     r"multimem_one_shot_reduce_kernel", r"one_shot_all_reduce_kernel",
                                     r"two_shot_all_reduce_kernel"),
           "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu", "allreduce", ("reduce_kernel",)),
    Family("symm-mem-allgather", _rx(r"multimem_all_gather_kernel"),
           "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu", "allgather",
           ("multimem_all_gather_kernel",)),
    Family("custom-allreduce", _rx(r"cross_device_reduce_1stage", r"cross_device_reduce_2stage"),
           "vllm-project/vllm csrc/custom_all_reduce.cuh (also sgl-kernel, SGLang)", "allreduce",
           ("cross_device_reduce_",)),
    Family("trtllm-allreduce", _rx(r"oneShotAllReduceKernel", r"twoShotAllReduceKernel",
                                   r"tensorrt_llm::kernels::\w*[Aa]llreduce"),
           "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu", "allreduce",
           ("AllReduceKernel", "tensorrt_llm::kernels::")),
    Family("nvshmem", _rx(r"nvshmem"), "NVIDIA NVSHMEM device library (nvshmemi_* / nvshmem_* kernels)", None,
           ("nvshmem",)),
    Family("te-userbuffers", _rx(r"userbuffers_", r"kuserbuffers_"),
           "NVIDIA/TransformerEngine common/comm_gemm_overlap/userbuffers/userbuffers.cu", None, ("userbuffers_",)),
)
# Tokens a communication kernel's name tends to carry; a kernel holding one that matched no family is
# reported (it may be a library this table does not know yet).
_LOOKS_LIKE = ("allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter",
               "alltoall", "all_to_all", "sendrecv", "send_recv", "multimem", "one_shot", "two_shot", "_p2p",
               "p2p_", "collective", "nvshmem", "userbuffers", "dispatch_combine")


def family_of(name: str) -> Family | None:
    """The first family whose pattern matches the name's head. Each pattern is searched only when the head holds
    one of its needles (a substring test is far cheaper than an unanchored regex over a 2 kB templated name, and
    most kernels are no family's), and each distinct name is classified once per process (ranks analysed in one
    process share their names)."""
    return _family(name[:NAME_CAP])


@functools.lru_cache(maxsize=4096)
def _family(head: str) -> Family | None:
    # "void " and a return type may precede a namespace: the search is unanchored but each pattern is a
    # literal (plus \w runs), so it stays linear.
    for f in FAMILIES:
        for x in f.needles:
            if x in head:
                if f.pattern.search(head):
                    return f
                break
    return None


def looks_like_comm(name: str) -> bool:
    """A communication token in the kernel's own name: the part before its template arguments and parameters
    (FlashAttention-3's `flash::compute_attn_ws<…CollectiveMainloopFwd…>` and CUTLASS 3's
    `GemmUniversal<…collective::CollectiveMma…>` carry "collective" only there). Inductor's `triton_*` kernels
    are generated compute whose names spell the fused ops (`triton_poi_fused_all_gather_copy_in_0`: FSDP2's
    copy into the all-gather buffer), never a collective. Each distinct name is read once per process."""
    return _looks_like_comm(name[:NAME_CAP])


@functools.lru_cache(maxsize=4096)
def _looks_like_comm(head: str) -> bool:
    cut = min((i for i in (head.find("<"), head.find("(")) if i >= 0), default=len(head))
    own = head[:cut].lower()
    if own.startswith("triton_") or own.startswith("triton__"):
        return False
    return any(tok in own for tok in _LOOKS_LIKE)
