"""Kernel names an expert knows at sight (issue 23 item 4): the "looks like communication … pass
--comm-regex" hint must not fire on FlashAttention, CUTLASS or Triton compute, and every DeepEP exchange kernel
(`cached_notify` included) is communication like `notify_dispatch`. Names are as the libraries emit them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.comm_families import family_of, looks_like_comm
from tests.gen.builder import TraceBuilder

REAL = Path(__file__).resolve().parents[3].parent / "shared/fixtures/real"

COMPUTE = [
    # FlashAttention-3 (Dao-AILab/flash-attention hopper/): the warp-specialised forward, before and after 2.7
    "void flash::compute_attn_ws<Flash_fwd_kernel_traits<128, 128, 128, 2, 2, false, 1, cutlass::bfloat16_t>, true, "
    "false, flash::SingleTileScheduler, flash::Seqlen_traits>(flash::CollectiveMainloopFwd<Flash_fwd_kernel_traits<"
    "128, 128, 128, 2, 2, false, 1, cutlass::bfloat16_t>, true, false, flash::Seqlen_traits>::Params, "
    "flash::CollectiveEpilogueFwd<Flash_fwd_kernel_traits<128, 128, 128, 2, 2, false, 1, cutlass::bfloat16_t>, "
    "flash::Seqlen_traits>::Params, flash::SingleTileScheduler::Params, flash::Seqlen_traits, flash::Seqlen_traits)",
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
    "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, "
    "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false>, flash::CollectiveEpilogueFwd<cute::tuple<"
    "cute::C<128>, cute::C<128>, cute::C<128> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false> > > >"
    "(flash::FlashAttnFwdSm90<>::Params)",
    # CUTLASS 3.x GEMM (its mainloop lives in cutlass::gemm::collective)
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, cute::tuple<"
    "cute::C<2>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative>, void, void> > >"
    "(cutlass::gemm::kernel::GemmUniversal<>::Params)",
    # Inductor's Triton kernels spell the fused ops: FSDP2's copy into and out of the collective buffers
    "triton_poi_fused_all_gather_copy_in_0",
    "triton_per_fused__to_copy_reduce_scatter_copy_in_1",
    "triton_red_fused_all_reduce_like_sum_2",
    # DeepEP's local layout count and v2's copy epilogue
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
    "deep_ep::elastic::dispatch_copy_epilogue_impl<true, false, false, 24, 4, 32, 1, 8, 7168, 0, 4096, 256, 8, 1>",
]

DEEPEP = {  # deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu and elastic/ (v2)
    "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*, int, int, int, bool const*, "
    "int*, int*, int, int, void**, int**, int, int)": "alltoall",
    "void deep_ep::intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int, int)": "alltoall",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*)": "alltoall",
    "void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int**, int, int)": "alltoall",
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*)": "alltoall",
    "void deep_ep::intranode::barrier<8>(int**, int, int)": "barrier",
    "void deep_ep::internode::notify_dispatch<false, 8>(int const*, int*, int, int const*, int*)": "alltoall",
    "void deep_ep::internode::cached_notify<32, 8>(int, int, int, int, int, int, int, int*, int, void*, int, int, "
    "int*, int, int, void*, int*, int*, int**, int, void**, int, int, bool)": "alltoall",
    "void deep_ep::internode::dispatch<false, 2, 8, 32, 16, 10>(int4*, float*, long*, float*)": "alltoall",
    "void deep_ep::internode::combine<false, 2, 8, 32, 16, 10>(int4*, float*)": "alltoall",
    "void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)": "alltoall",
    "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, float*, int*, long*)": "alltoall",
    "void deep_ep::internode_ll::combine<false, 3, 7168, 9>(void*, void*, int*)": "alltoall",
    "deep_ep::elastic::dispatch_impl<true, 3, false, false, 24, 4, 14, 8, 7168, 0, 4096, 256, 8, 1, 0, 100>": "alltoall",
    "deep_ep::elastic::hybrid_combine_impl<false, 24, 4, 8, 8, 2, 7168, 4096, 256, 8, 0, 100>": "alltoall",
}


@pytest.mark.parametrize("name", COMPUTE, ids=lambda n: n[:40])
def test_compute_kernels_do_not_look_like_communication(name):
    assert family_of(name) is None and not looks_like_comm(name)


@pytest.mark.parametrize("name", sorted(DEEPEP), ids=lambda n: n[5:60])
def test_every_deepep_exchange_kernel_is_communication(name):
    f = family_of(name)
    assert f is not None and f.kind == DEEPEP[name]


@pytest.mark.parametrize("name", ["void mylib::ring_allreduce_kernel<float>(float*, int)", "custom_alltoall_v2",
                                  "void pplx::dispatch_combine_kernel<8>(int)"])
def test_unknown_communication_still_gets_the_hint(name):
    assert family_of(name) is None and looks_like_comm(name)


@pytest.mark.real
def test_no_kernel_of_the_real_fixtures_gets_the_hint():
    """The CUTLASS, cuDNN-CUTLASS, Triton, vLLM and TensorRT-LLM kernels of the real traces: none is named as
    communication-looking; their NCCL/RCCL kernels all belong to a family."""
    assert REAL.is_dir(), f"the shared real fixtures stand beside every checkout CI runs: {REAL}"
    names = set()
    for f in REAL.rglob("*.json.gz"):
        d = json.load(gzip.open(f))
        events = d.get("traceEvents", []) if isinstance(d, dict) else d  # some write a bare event list
        names |= {e["name"] for e in events if isinstance(e, dict) and e.get("cat") == "kernel"}
    assert sum("cutlass" in n for n in names) > 10 and sum(n.startswith("triton") for n in names) >= 3
    assert not [n for n in names if looks_like_comm(n) and family_of(n) is None]


def test_no_hint_in_a_trace_of_attention_and_gemm(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 2000)
    for j, n in enumerate(COMPUTE):
        b.kernel(n, 100 + 150 * j, 100, launch_at=10 + j)
    a = analyze_path(b.write(tmp_path / "rank0.pt.trace.json"), rules=False, jobs=1)
    assert not any("look like communication" in i.message for i in a.issues)
    assert a.ranks[0].comm_ms == 0
