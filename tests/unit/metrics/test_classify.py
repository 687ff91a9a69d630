"""Kernel semantics: what each device event is (host op first, family table next, name heuristics last)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.io import fastjson
from llmdiag.diagnose.io.trace import COMPUTE
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.model.devices import link_busbw_gbps, link_peak
from tests.gen import traces as gen_traces
from tests.gen.builder import TraceBuilder

A2A_IN = [3, 1, 4, 1]
A2A_OUT = [2, 7, 1, 8]


def _a2a_trace(tmp_path, name="a2a.json"):
    b = TraceBuilder(rank=0, world_size=4)
    b.step(1, 0, 1000)
    b.kernel("ncclKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", 100, 300, stream=20,
             args={"Collective name": "all_to_all", "In msg nelems": 9, "Out msg nelems": 18, "dtype": "BFloat16",
                   "Group size": 4, "In split size": A2A_IN, "Out split size": A2A_OUT,
                   "Process Group Name": "3", "Process Group Description": "ep"})
    return b.write(tmp_path / name)


@pytest.mark.parametrize("parser", ["msgspec", "orjson"])
def test_all_to_all_split_sizes_kept(tmp_path, monkeypatch, parser):
    """Engineer D's MoE analysis reads the per-peer split sizes of all_to_all from the loader."""
    if parser == "orjson":
        monkeypatch.setattr(fastjson, "_DECODER", None)
    else:  # msgspec is a declared dependency: its absence is a broken install, not a reason to skip
        assert fastjson._DECODER is not None
    t = load_trace(_a2a_trace(tmp_path))
    (args,) = [a for a in t.comm_args.values() if a.get("Collective name") == "all_to_all"]
    assert args["In split size"] == A2A_IN
    assert args["Out split size"] == A2A_OUT


# ------------------------------------------------------------------ host op first: kind from the launching op

REAL = "../shared/fixtures/real"


def _analyse(tmp_path, *builders, **kw):
    d = tmp_path / "run"
    for b in builders:
        b.write(d / f"rank{b.rank}.json")
    return analyze_path(str(d), rules=False, jobs=1, **kw)


def _kinds(m) -> dict:
    out: dict = {}
    for c in m.comm_by_kind:
        out[c.kind] = out.get(c.kind, 0) + c.count
    return out


def test_sendrecv_kernel_under_all_to_all_op_is_all_to_all(tmp_path):
    """2022 schema: no collective args anywhere; the kernel's launch sits in nccl:all_to_all, itself in
    c10d::alltoall_base_ > record_param_comms. A real send/recv stays send/recv."""
    b = TraceBuilder(rank=0, world_size=4)
    b.step(1, 0, 2000)
    b.cpu_op("c10d::alltoall_base_", 10, 60)
    b.cpu_op("record_param_comms", 12, 50)
    b.cpu_op("nccl:all_to_all", 15, 40)
    b.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 100, 300,
             stream=20, launch_at=20)
    b.cpu_op("nccl:send", 500, 20)
    b.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 600, 100,
             stream=21, launch_at=505)
    b.kernel("void gemm_bf16()", 100, 200, stream=7, launch_at=30)  # launched under nccl:all_to_all too
    (m,) = _analyse(tmp_path, b).ranks
    assert _kinds(m) == {"alltoall": 2, "send": 1}  # the GEMM launched inside the op counts as its work
    assert m.compute_ms == 0.0


def test_record_param_comms_args_name_the_kind(tmp_path):
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 1000)
    b.cpu_op("record_param_comms", 10, 50, args={"Collective name": "all_to_allv", "dtype": "BFloat16",
                                                   "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 2,
                                                   "Process Group Name": "5", "Process Group Description": "ep"})
    b.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 100, 200, stream=20, launch_at=20)
    (m,) = _analyse(tmp_path, b).ranks
    (c,) = m.comm_by_kind
    assert (c.kind, c.pg, c.bytes, c.group_size) == ("alltoall", "ep", 2000, 2)


@pytest.mark.real
def test_b200_multimem_all_reduce_is_communication():
    """Real vLLM B200 TP8 trace: 73 multimem_all_reduce_kernel launched under symm_mem::multimem_all_reduce_
    (counted from the JSON: 2.12 ms in all), formerly compute."""
    a = analyze_path(f"{REAL}/tracelens/b200_vllm_tp8_rank0.json.gz", rules=False, jobs=1)
    (m,) = a.ranks
    by = {c.kind: c for c in m.comm_by_kind}
    assert by["allreduce"].count == 73 and by["allreduce"].total_ms == pytest.approx(2.12, abs=0.01)
    assert m.comm_ms == pytest.approx(2.12 + by["allgather"].total_ms, abs=0.01)


@pytest.mark.parametrize("mode", sorted(gen_traces.DEEPEP))
def test_deepep_kernels_are_all_to_all_communication(tmp_path, mode):
    b, ex = gen_traces.deepep_ep_rank(mode=mode)
    (m,) = _analyse(tmp_path, b).ranks
    assert [s.time_ms for s in m.steps] == [pytest.approx(u / 1e3) for u in ex.step_us]
    assert [s.comm_ms for s in m.steps] == [pytest.approx(u / 1e3) for u in ex.comm_us]
    assert [s.compute_ms for s in m.steps] == [pytest.approx(u / 1e3) for u in ex.compute_us]
    assert m.overlap_ratio == pytest.approx(ex.overlap_ratio)
    assert _kinds(m) == {"alltoall": 2 * 3 * 3}
    assert not any("look like communication" in w for w in m.warnings)


@pytest.mark.parametrize("variant", sorted(gen_traces.TP_ALLREDUCE))
def test_symmetric_memory_and_custom_all_reduce(tmp_path, variant):
    b, ex = gen_traces.symm_mem_tp_rank(variant=variant)
    (m,) = _analyse(tmp_path, b).ranks
    assert [s.comm_ms for s in m.steps] == [pytest.approx(u / 1e3) for u in ex.comm_us]
    assert [s.compute_ms for s in m.steps] == [pytest.approx(u / 1e3) for u in ex.compute_us]
    assert m.overlap_ratio == pytest.approx(ex.overlap_ratio) == 0.0
    assert _kinds(m) == {"allreduce": 8}


def test_family_table_without_host_ops(tmp_path):
    """The same kernels with no host op (launched outside the profiled window) are known by name."""
    b = TraceBuilder(rank=0, world_size=8)
    b.step(1, 0, 1000)
    b.kernel(gen_traces.TP_ALLREDUCE["vllm_custom"][1], 100, 50, launch=False)
    b.kernel(gen_traces.TP_ALLREDUCE["multimem"][1], 200, 50, launch=False)
    b.kernel("void transformer_engine::userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, void**)", 300, 50,
             launch=False)
    b.kernel("nvshmemi_proxy_progress_kernel", 400, 50, launch=False)
    b.kernel("void gemm()", 500, 50, launch=False)
    (m,) = _analyse(tmp_path, b).ranks
    assert m.comm_ms == pytest.approx(0.2) and m.compute_ms == pytest.approx(0.05)


def test_unknown_comm_looking_kernel_is_reported_once_naming_comm_regex(tmp_path):
    b = TraceBuilder(rank=0, world_size=8)
    b.step(1, 0, 1000)
    for s in (100, 300):
        b.kernel("void mylib::fused_allreduce_rmsnorm<8>(float*)", s, 50)
    b.kernel("void gemm()", 500, 50)
    (m,) = _analyse(tmp_path, b).ranks
    hits = [w for w in m.warnings if "look like communication" in w]
    assert len(hits) == 1 and "--comm-regex" in hits[0] and "1 kernel name(s)" in hits[0]
    assert m.comm_ms == 0.0 and m.compute_ms == pytest.approx(0.15)
    (m2,) = _analyse(tmp_path / "x", b, comm_regex="fused_allreduce").ranks
    b1 = TraceBuilder(rank=1, world_size=8, events=[e for e in b.events])
    a = _analyse(tmp_path / "two", b, b1)  # two ranks, one issue
    assert len([i for i in a.issues if "look like communication" in i.message]) == 1
    assert m2.comm_ms == pytest.approx(0.1) and not any("look like communication" in w for w in m2.warnings)


def test_classification_is_linear_on_hostile_names(tmp_path):
    """Issue #17.5: a 1 MB kernel name holding "gemm" (and "_f32_"), and a 1 MB DataLoader op name, classify
    in well under a second (the old regexes backtracked quadratically: 300+ s and 47 s)."""
    import time

    big_kernel = "void gemm" + "_f32_x" * 170_000 + "("
    big_op = "enumerate(DataLoader)#_SingleProcessDataLoaderIter." + "dataloader_" * 95_000
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    b.cpu_op(big_op, 150, 50)  # inside the device window [100, 500]
    b.kernel(big_kernel, 100, 200)
    b.kernel("nccl" + "x" * 1_000_000, 400, 100)
    path = b.write(tmp_path / "big" / "rank0.json")
    t = load_trace(path)
    t0 = time.perf_counter()
    classify(t)
    from llmdiag.diagnose.metrics.rank.kernels import hints
    from llmdiag.diagnose.metrics.rank.steps import windows

    wins, _ = windows(t)
    h = hints(t, wins, 0.0, 1.0)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, elapsed
    assert (t.kind[t.name == t.names.index(big_kernel)] == COMPUTE).all()
    assert h.dataloader_frac is not None and h.dataloader_frac > 0


# ------------------------------------------------------------------ link peaks (issue 13 item 6)


@pytest.mark.parametrize("device,want", [
    ("Tesla V100-SXM2-32GB", 130.0), ("Tesla V100-PCIE-16GB", 12.0), ("NVIDIA A100-PG509-200", 240.0),
    ("NVIDIA A100-SXM4-80GB", 240.0), ("NVIDIA A100 80GB PCIe", 24.0), ("NVIDIA H100 80GB HBM3", 360.0),
    ("NVIDIA H100 PCIe", 48.0), ("NVIDIA H200", 360.0), ("NVIDIA H800", 160.0), ("NVIDIA B200", 720.0),
    ("NVIDIA GB200", 720.0), ("NVIDIA L40S", 24.0), ("NVIDIA L4", 24.0), ("AMD Instinct MI250X", 100.0),
    ("AMD Instinct MI300X", 310.0), ("AMD Instinct MI325X", 310.0),
    ("AMD Radeon Graphics", None), ("Tesla T4", None), ("", None), (None, None), ("NVIDIA GeForce RTX 4090", None),
])
def test_link_peaks(device, want):
    assert link_busbw_gbps(device) == want
    if want is not None:
        assert link_peak(device).source  # every peak names where it comes from


@pytest.mark.real
def test_mi300x_all_reduce_far_below_its_link():
    """The MI300X DDP fixture's all-reduce reaches ~2.6 GB/s busbw: now comparable to a known peak."""
    a = analyze_path(f"{REAL}/tracelens/mi300_ddp8_actckpt_rank0.json.gz", rules=False, jobs=1)
    (m,) = a.ranks
    ar = next(c for c in m.comm_by_kind if c.kind == "allreduce")
    peak = link_busbw_gbps("AMD Instinct MI300X")
    assert ar.busbw_gbps is not None and ar.busbw_gbps < 0.02 * peak


@pytest.mark.parametrize("name,want", [
    ("record_param_comms", True), ("nccl:all_to_all", True), ("c10d::alltoall_base_", True),
    ("_c10d_functional::all_gather_into_tensor", True), ("symm_mem::multimem_all_reduce_", True),
    ("vllm::all_reduce", True), ("c10d::wait", False), ("_c10d_functional::wait_tensor", False),
    ("aten::all_reduce_like_name", False), ("prims::broadcast_in_dim", False), ("aten::broadcast_tensors", False),
    ("aten::mm", False), ("deep_ep::Buffer::dispatch", False),
    ("FSDP::all_gather_copy_in", False), ("FSDP::all_gather_copy_out", False),
])
def test_host_communication_ops(name, want):
    from llmdiag.diagnose.metrics.rank.host_ops import is_comm_op

    assert is_comm_op(name) is want


def test_a_span_named_for_a_collective_does_not_make_its_kernels_communication(tmp_path):
    """FSDP2 wraps its all-gather in a `FSDP::all_gather` record_function span that also encloses the copy-in
    kernels (and, in a trace, whatever the caller launched there): only the NCCL kernel, launched under
    `record_param_comms`, is communication; the copy kernel under the span alone stays compute."""
    from tests.gen.builder import TraceBuilder

    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 1000)
    b.annotation("FSDP::all_gather", 10, 200)
    b.kernel("void at::native::elementwise_kernel<128, 4>(copy)", 300, 50, stream=7, launch_at=20)
    b.nccl("allgather", 400, 100, stream=20, launch_at=30, nelems=1 << 16, group_size=2, pg_ranks=[0, 1])
    a = analyze_path(b.write(tmp_path / "rank0.pt.trace.json"), rules=False, jobs=1)
    (m,) = a.ranks
    assert [c.kind for c in m.comm_by_kind] == ["allgather"]
    assert m.comm_ms == pytest.approx(0.1) and m.compute_ms == pytest.approx(0.05)


DEEPEP_NAMESPACES = [  # (kernel, communication?): DeepEP's kernels in every namespace it ships, and near misses
    ("void dpsk::ep::intranode::cached_notify<8>(int**, int, int, int)", True),  # issue #27.6: was compute
    ("void dpsk::ep::internode::cached_notify_combine<8>(void**, int*, int)", True),
    ("void dpsk::ep::internode::notify_dispatch<true, 8>(int const*, int*, int)", True),
    ("void dpsk::ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)", True),
    ("void dpsk::ep::internode_ll::dispatch<true, 3, 7168>(void*, float*)", True),
    ("void dpsk::ep::intranode::barrier<8>(int**, int, int)", True),
    ("deep_ep::ep::dispatch_impl<true, false, false, 24, 4, 14, 8, 7168, 0, 4096, 256, 8, 1, 0, 100>", True),
    ("deep_ep::ep::hybrid_combine_impl<false, false, 24, 4, 4, 2, 8, 7168, 4096, 256, 8, 0, 100>", True),
    ("deep_ep::ep::lb_prefetch_weights<24, 8, 8, 4, 2, 3, 12288, 100>", True),
    # local work in the same namespaces, and MoE kernels that only carry the words
    ("deep_ep::ep::dispatch_copy_epilogue_impl<true, false, false, true, 24, 4, 32, 1, 8, 7168>", False),
    ("deep_ep::ep::combine_reduce_epilogue_impl<false, false, 24, 32, 1, 8, 7168, 4096, 256, 8>", False),
    ("void dpsk::ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int)", False),
    ("void moe_dispatch_permute<__nv_bfloat16>(__nv_bfloat16 const*, int const*, __nv_bfloat16*)", False),
    ("void moe_combine_unpermute_kernel<float>(float const*, float*)", False),
    ("void hybrid_ep::permute_kernel<128>(float*)", False),
    ("void cdpsk::ep::CUB_DeviceScanKernel<cdpsk::ep::CUB_DeviceScanPolicy<int>::Policy600, int*>(int*)", False),
    ("void cdpsk::ep::internode::dispatch<1>(int*)", False),  # another namespace that merely ends in dpsk::ep
]


def test_deepep_kernels_in_every_namespace_without_host_ops(tmp_path):
    """Each kernel alone (no host op, no args: only its name can say), 100 µs apart, 50 µs long: the communication
    time is 50 µs × the kernels the table says are communication, computed here from the list."""
    b = TraceBuilder(rank=0, world_size=8)
    b.step(1, 0, 100 * len(DEEPEP_NAMESPACES) + 100)
    for i, (name, _) in enumerate(DEEPEP_NAMESPACES):
        b.kernel(name, 100 + 100 * i, 50, launch=False)
    (m,) = _analyse(tmp_path, b).ranks
    n_comm = sum(c for _, c in DEEPEP_NAMESPACES)
    assert m.comm_ms == pytest.approx(0.05 * n_comm)
    assert m.compute_ms == pytest.approx(0.05 * (len(DEEPEP_NAMESPACES) - n_comm))
