"""family_of's needle prefilter and per-name cache change its cost, never its answer: on every kernel name of
the real fixtures, the names the libraries emit, and near misses, it equals the plain search of each family's
pattern in order (the definition in comm_families.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.comm_families import FAMILIES, NAME_CAP, family_of
from tests.unit.metrics.test_pipeline_comm_names import COMPUTE, DEEPEP

REAL = Path(__file__).resolve().parents[3].parent / "shared/fixtures/real"

LIBRARY_NAMES = [
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "nccl:all_reduce", "ncclAllReduceRingLLKernel_sum_f32(ncclColl)",
    "rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)", "void rcclKernel_Generic()",
    "mscclKernel_Sum_float_LL(int, int)", "void mscclpp::reduceScatterKernel<float>(float*)",
    "dpsk::ep::intranode::fused_combine_kernel<8>()", "dpsk::ep::internode::dispatch_tokens()",
    "void dpsk::ep::intranode::cached_notify<8>(int**, int)", "dpsk::ep::cached_notify(int)",
    "void dpsk::ep::internode_ll::clean_low_latency_buffer<32>(int*)", "void dpsk::ep::intranode::barrier<8>()",
    "deep_ep::ep::dispatch_impl<true, 100>", "deep_ep::ep::hybrid_combine_impl<false, 100>",
    "deep_ep::ep::lb_reduce_grads<24, 8>", "dpsk::ep::internode::lb_prefetch_weights<1>",
    "void c10d::symmetric_memory::(anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>",
    "multimem_one_shot_reduce_kernel", "two_shot_all_reduce_kernel<float>", "multimem_all_gather_kernel<4>",
    "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)",
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<float, 8>(AllReduceParams)",
    "tensorrt_llm::kernels::lamport_allreduce<half>", "nvshmemi_proxy_progress_kernel",
    "void transformer_engine::userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, void**)",
    "kuserbuffers_pullsend(int)",
    # near misses: a needle without its pattern, or a pattern's word in another case
    "my_nccl_helper", "void ncclSomethingElse()", "xrccl", "deep_ep::layout::get_dispatch_layout<1>()",
    "reduce_kernel_generic<float>", "allreducekernel", "Tensorrt_llm::kernels::allreduce", "NVSHMEM_init",
    "userbuffers", "cross_device_reduce", "deep_ep::intranode::barrier<8>", "deep_ep::elastic::barrier_impl",
    "dpsk::ep::layout::get_dispatch_layout<1>()", "deep_ep::ep::dispatch_copy_epilogue_impl<1>",
    "deep_ep::ep::combine_reduce_epilogue_impl<1>", "void moe_dispatch_permute<float>(float*)",
    "DPSK::EP::INTRANODE::CACHED_NOTIFY<8>", "void cdpsk::ep::internode::dispatch<1>(int*)",
]


def _plain(name: str):
    head = name[:NAME_CAP]
    return next((f for f in FAMILIES if f.pattern.search(head)), None)


def _fixture_names() -> set[str]:
    """Every event name of the real Kineto fixtures (kernels and host ops), as the loader interns them."""
    assert REAL.is_dir(), f"the shared real fixtures stand beside every checkout CI runs: {REAL}"
    names: set[str] = set()
    for sub in ("hta", "tracelens", "kineto"):
        for f in (REAL / sub).rglob("*.json.gz"):
            names |= set(load_trace(str(f)).names)
    return names


@pytest.mark.real
def test_prefilter_gives_the_plain_search_answer():
    names = _fixture_names() | set(COMPUTE) | set(DEEPEP) | set(LIBRARY_NAMES)
    names |= {"void " + n for n in list(names)} | {n.upper() for n in LIBRARY_NAMES}
    got = {n: family_of(n) for n in names}
    assert got == {n: _plain(n) for n in names}
    assert sum(f is not None for f in got.values()) >= 40  # the corpus exercises the families, not only misses
    assert {f.name for f in got.values() if f} == {f.name for f in FAMILIES}  # every family, at least once


def test_every_family_names_its_needles():
    for f in FAMILIES:
        assert f.needles and all(isinstance(x, str) and x for x in f.needles), f.name


def test_long_names_are_cut_before_matching():
    pad = "x" * NAME_CAP
    assert family_of("ncclDevKernel_AllReduce" + pad) is FAMILIES[0]
    assert family_of(pad + "nvshmem") is None  # the token lies past the cap: not read
