"""Every metric against an exact answer computed by hand from a synthetic trace.

All times in the traces are integer µs (tests/gen/builder.py), so llmdiag's integer-ns arithmetic must give the
numbers below exactly; float comparisons use a tolerance far below one ns (1e-9 ms).
"""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.job.pipeline.bubbles import analyse_pipeline
from llmdiag.diagnose.metrics.rank.classify import classify, collective_kind
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.overlap import busbw_factor
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action, theory_bubble
from llmdiag.diagnose.simulate.replay import complete_pipeline, predict
from llmdiag.diagnose.io.trace import COMM, COMPUTE, SYNC
from tests.gen.builder import GLOO_TID, TraceBuilder, cpu_rank, gpu_rank

EPS = 1e-9  # ms: far below one ns


def approx(v):
    return pytest.approx(v, abs=EPS, rel=1e-12)


def analyse(tmp_path, *builders, sub="run", **kw):
    d = tmp_path / sub
    for b in builders:
        b.write(d / f"rank{b.rank}.json")
    kw.setdefault("jobs", 1)
    return analyze_path(str(d), rules=False, **kw)


def one(tmp_path, b, **kw):
    a = analyse(tmp_path, b, **kw)
    assert len(a.ranks) == 1
    return a.ranks[0]


def parts_sum(s):
    return s.compute_only_ms + s.overlapped_comm_ms + s.exposed_comm_ms + s.other_ms + s.idle_ms


# ------------------------------------------------------------------------------------------------ overlap


def test_overlap_concurrent_streams_count_once(tmp_path):
    """Two compute kernels on two streams overlap each other; their shared 100 µs counts once."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.kernel("void gemm_a()", 100, 200, stream=7, launch_at=10)  # [100, 300]
    b.kernel("void gemm_b()", 200, 200, stream=8, launch_at=11)  # [200, 400], concurrent with gemm_a
    b.nccl("allreduce", 350, 250, stream=20, launch_at=12)  # [350, 600]
    b.memcpy(650, 50, stream=9, launch_at=13)  # [650, 700]
    b.kernel("void gemm_c()", 800, 100, stream=7, launch_at=14)  # [800, 900]
    r = one(tmp_path, b)
    (s,) = r.steps
    # device window [100, 900]; U(compute) = [100,400] ∪ [800,900]; U(comm) = [350,600]
    assert s.time_ms == approx(0.800)
    assert s.compute_ms == approx(0.400)
    assert s.comm_ms == approx(0.250)
    assert s.overlapped_comm_ms == approx(0.050)
    assert s.exposed_comm_ms == approx(0.200)
    assert s.compute_only_ms == approx(0.350)
    assert s.other_ms == approx(0.050)  # the memcpy, under nothing else
    assert s.idle_ms == approx(0.150)  # [600,650] + [700,800]
    assert s.overlap_ratio == pytest.approx(0.2)
    assert parts_sum(s) == approx(s.time_ms)
    assert r.overlap_ratio == pytest.approx(0.2)
    assert r.exposed_comm_frac == pytest.approx(0.25)
    assert r.idle_frac == pytest.approx(0.15 / 0.8)


@pytest.mark.parametrize(
    "comm, compute, ratio, exposed",
    [
        ([(300, 200)], [(100, 200)], 0.0, 0.200),  # fully exposed (touching is not overlapping)
        ([(200, 100), (250, 150)], [(100, 400)], 1.0, 0.0),  # fully hidden; two comm streams union to 200
        ([(200, 200)], [(100, 150)], 0.25, 0.150),  # partial: [200, 250] of [200, 400]
    ],
    ids=["exposed", "hidden", "partial"],
)
def test_overlap_exposed_hidden_partial(tmp_path, comm, compute, ratio, exposed):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    for k, (s, d) in enumerate(compute):
        b.kernel("void k()", s, d, stream=7, launch_at=10 + k)
    for k, (s, d) in enumerate(comm):
        b.nccl("allreduce", s, d, stream=20 + k, launch_at=20 + k)
    r = one(tmp_path, b)
    assert r.overlap_ratio == pytest.approx(ratio)
    assert r.exposed_comm_ms == approx(exposed)
    assert parts_sum(r.steps[0]) == approx(r.steps[0].time_ms)


def test_no_communication_gives_none_not_nan(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.kernel("void k()", 100, 300, launch_at=10)
    r = one(tmp_path, b)
    assert r.overlap_ratio is None and r.steps[0].overlap_ratio is None
    assert r.comm_ms == 0 and r.exposed_comm_ms == 0 and r.exposed_comm_frac == 0
    assert r.comm_by_kind == []


def test_overall_overlap_is_duration_weighted_over_steps(tmp_path):
    """Step 1: 100 µs comm fully hidden; step 2: 300 µs fully exposed → 100/400, not mean(1, 0)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.kernel("void k()", 100, 300, launch_at=10)
    b.nccl("allreduce", 200, 100, launch_at=11)
    b.step(2, 1000, 2000)
    b.kernel("void k()", 1100, 300, launch_at=1010)
    b.nccl("allreduce", 1400, 300, launch_at=1011)
    r = one(tmp_path, b)
    assert [s.overlap_ratio for s in r.steps] == [1.0, 0.0]
    assert r.overlap_ratio == pytest.approx(0.25)
    assert [s.time_ms for s in r.steps] == [approx(0.3), approx(0.6)]
    assert r.step_time_ms == approx(0.45)
    assert r.exposed_comm_ms == approx(0.15)  # (0 + 0.3) / 2 steps


def test_device_windows_come_from_correlation(tmp_path):
    """Kernels run after their launch; a step-1 kernel running during host step 2 still belongs to step 1."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    b.kernel("void s1a()", 800, 400, launch_at=100)  # [800, 1200]
    b.kernel("void s1b()", 1200, 300, launch_at=900)  # [1200, 1500]: launched in step 1
    b.kernel("void s2a()", 1500, 400, launch_at=1100)  # [1500, 1900]
    b.kernel("void s2b()", 2500, 100, launch_at=1900)  # [2500, 2600]
    r = one(tmp_path, b)
    assert [s.step for s in r.steps] == [1, 2]
    assert [s.start_ms for s in r.steps] == [approx(0.8), approx(1.5)]
    assert [s.time_ms for s in r.steps] == [approx(0.7), approx(1.1)]
    assert [s.compute_ms for s in r.steps] == [approx(0.7), approx(0.5)]
    assert [s.idle_ms for s in r.steps] == [approx(0.0), approx(0.6)]
    # HTA's convention: the last step is dropped
    r = one(tmp_path, b, exclude_last_step=True, sub="hta")
    assert [s.step for s in r.steps] == [1] and r.step_time_ms == approx(0.7)


def test_step_without_gpu_work_uses_host_span_and_warns(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.kernel("void k()", 100, 300, launch_at=10)
    b.step(2, 1000, 1500)  # launches nothing
    b.cpu_op("aten::empty", 1100, 20)  # host work: an iteration (an empty last step is the profiler's stop)
    r = one(tmp_path, b)
    assert [s.time_ms for s in r.steps] == [approx(0.3), approx(0.5)]
    assert r.steps[1].idle_ms == approx(0.5)
    assert any("launched no GPU work" in w for w in r.warnings)


# ------------------------------------------------------------------------------------------- collectives


def test_per_collective_overlap_is_duration_weighted_per_op(tmp_path):
    """Per kind each op's own overlapped time is summed (Nsight's view); the rank ratio is a union."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.kernel("void k()", 150, 50, stream=7, launch_at=10)  # compute [150, 200]
    b.nccl("allreduce", 100, 100, stream=20, launch_at=11)  # [100, 200]: 50 overlapped
    b.nccl("allgather", 150, 100, stream=21, launch_at=12)  # [150, 250]: 50 overlapped
    b.nccl("allreduce", 300, 10, stream=20, launch_at=13)  # [300, 310]: exposed
    r = one(tmp_path, b)
    by = {c.kind: c for c in r.comm_by_kind}
    assert set(by) == {"allreduce", "allgather"}
    assert by["allreduce"].count == 2 and by["allreduce"].total_ms == approx(0.110)
    assert by["allreduce"].overlapped_ms == approx(0.050)
    assert by["allreduce"].overlap_ratio == pytest.approx(50 / 110)
    assert by["allgather"].count == 1 and by["allgather"].overlap_ratio == pytest.approx(0.5)
    assert by["allreduce"].pg == "default_pg"
    # rank level: U(comm) = [100,250] ∪ [300,310] = 160, overlapped 50
    assert r.overlap_ratio == pytest.approx(50 / 160)


def test_busbw_nccl_tests_factors(tmp_path):
    """bytes = nelems × dtype size; algbw = bytes / time; busbw = algbw × nccl-tests factor (n = 4)."""
    b = TraceBuilder(world_size=4)
    b.step(1, 0, 20000)
    # all-reduce: 1e6 float = 4e6 B in 1000 µs → 4 GB/s; × 2(n−1)/n = 1.5 → 6
    b.nccl("allreduce", 100, 1000, launch_at=10, nelems=1_000_000, dtype="Float", group_size=4)
    # all-gather: out 1e6 bf16 = 2e6 B in 500 µs → 4 GB/s; × (n−1)/n → 3
    b.nccl("allgather", 2000, 500, launch_at=11, nelems=250_000, out_nelems=1_000_000, dtype="BFloat16",
           group_size=4)
    # reduce-scatter: in 1e6 float = 4e6 B in 2000 µs → 2 GB/s; × (n−1)/n → 1.5
    b.nccl("reducescatter", 3000, 2000, launch_at=12, nelems=1_000_000, out_nelems=250_000, dtype="Float",
           group_size=4)
    # broadcast: 1e6 half = 2e6 B in 1000 µs → 2 GB/s; factor 1
    b.nccl("broadcast", 6000, 1000, launch_at=13, nelems=1_000_000, dtype="Half", group_size=4)
    r = one(tmp_path, b)
    by = {c.kind: c for c in r.comm_by_kind}
    expect = {"allreduce": (4e6, 4.0, 6.0), "allgather": (2e6, 4.0, 3.0), "reducescatter": (4e6, 2.0, 1.5),
              "broadcast": (2e6, 2.0, 2.0)}
    for kind, (nbytes, algbw, busbw) in expect.items():
        c = by[kind]
        assert c.bytes == nbytes, kind
        assert c.sized_count == 1 and c.group_size == 4
        assert c.algbw_gbps == pytest.approx(algbw), kind
        assert c.busbw_gbps == pytest.approx(busbw), kind


def test_busbw_group_size_from_pg_config(tmp_path):
    """Without `Group size` in the args, the group's size comes from distributedInfo.pg_config."""
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 16, "ranks": list(range(16))},
           {"pg_name": "3", "pg_desc": "mesh_dp", "pg_size": 8, "ranks": list(range(0, 16, 2))}]
    b = TraceBuilder(world_size=16, pg_config=pgs)
    b.step(1, 0, 5000)
    b.nccl("allreduce", 100, 1000, launch_at=10, nelems=1_000_000, pg_name="3", pg_desc="mesh_dp")
    r = one(tmp_path, b)
    (c,) = r.comm_by_kind
    assert c.pg == "mesh_dp" and c.group_size == 8
    assert c.busbw_gbps == pytest.approx(4.0 * 2 * 7 / 8)


def test_busbw_factor_table():
    assert busbw_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("allgather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reducescatter", 8) == pytest.approx(7 / 8)
    assert busbw_factor("broadcast", 8) == 1.0
    assert busbw_factor("sendrecv", 8) == 1.0
    assert busbw_factor("allreduce", 1) == 1.0 and busbw_factor("allreduce", None) == 1.0


def test_nccl_dev_kernel_names_are_comm(tmp_path):
    """NCCL ≥ 2.19 names its kernels ncclDevKernel_*; with no collective args they are still comm."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.kernel("void k()", 100, 200, launch_at=10)
    b.kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 200, 200, stream=20, launch_at=11)
    b.kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 400, 100, stream=20, launch_at=12)
    r = one(tmp_path, b)
    assert r.comm_ms == approx(0.3) and r.overlapped_comm_ms == approx(0.1)
    kinds = {c.kind for c in r.comm_by_kind}
    assert "allgather" in kinds
    assert collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)") == "reducescatter"
    assert collective_kind("ncclDevKernel_AllReduce_Sum_f32_TREE_LL(x)") == "allreduce"


def test_amd_cijk_kernels_are_compute(tmp_path):
    """ROCm: hipBLASLt/Tensile GEMMs are `Cijk_*` on stream 0; RCCL kernels are comm."""
    b = TraceBuilder(device_properties=[{"id": 0, "name": "AMD Instinct MI250X", "totalGlobalMem": 68702699520}])
    b.step(1, 0, 1000)
    b.kernel("Cijk_Alik_Bljk_SB_MT64x64x16_MI16x16x1_SN_LDSB0_AFC1", 100, 300, stream=0, launch_at=10)
    b.kernel("rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)", 300, 200, stream=1,
             launch_at=11)
    r = one(tmp_path, b)
    assert r.trace_kind == "gpu"
    assert r.compute_ms == approx(0.3) and r.comm_ms == approx(0.2)
    assert r.overlap_ratio == pytest.approx(0.5)
    kinds = {k.name: k.kind for k in r.top_kernels}
    assert kinds["Cijk_Alik_Bljk_SB_MT64x64x16_MI16x16x1_SN_LDSB0_AFC1"] == "compute"


DEEPEP = "void deep_ep::intranode::dispatch<8, 768>(int4*, float*, int*, long*)"


# A library the family table does not know (DeepEP itself is in it: tests/unit/metrics/test_classify.py).
UNKNOWN_EP = "void myco::ep::exchange_tokens<8, 768>(int4*, float*, int*, long*)"


def _deepep_trace(name=UNKNOWN_EP):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.kernel("void gemm()", 100, 300, launch_at=10)
    b.kernel(name, 300, 200, stream=30, launch_at=11)
    return b


def test_comm_regex_marks_custom_kernels(tmp_path):
    b = _deepep_trace()
    default = one(tmp_path, b, sub="default")
    assert default.overlap_ratio is None and default.compute_ms == approx(0.4)
    known = one(tmp_path, _deepep_trace(DEEPEP), sub="known")  # DeepEP is communication with no regex
    assert known.compute_ms == approx(0.3) and known.comm_ms == approx(0.2)
    custom = one(tmp_path, b, sub="regex", comm_regex=r"myco::ep::")
    assert custom.compute_ms == approx(0.3) and custom.comm_ms == approx(0.2)
    assert custom.overlap_ratio == pytest.approx(0.5)
    assert custom.exposed_comm_ms == approx(0.1)


def test_comm_regex_through_the_cli(tmp_path):
    from llmdiag.diagnose.cli.analyze import analyze

    path = _deepep_trace().write(tmp_path / "t" / "rank0.json")
    out = tmp_path / "s.json"
    res = CliRunner().invoke(analyze, [path, "--no-report", "-q", "--json", str(out), "--comm-regex", "myco::ep::",
                                       "-j", "1"])
    assert res.exit_code == 0, res.output
    summary = orjson.loads(out.read_bytes())
    assert summary["options"]["comm_regex"] == "myco::ep::"
    assert summary["ranks"][0]["overlap_ratio"] == pytest.approx(0.5)


# ------------------------------------------------------------------------------------------------ CPU / gloo


def _gloo_trace(named_thread=True):
    b = TraceBuilder(backend="gloo")
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 100, 200)  # [100, 300] top level
    b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 400, 300)  # [400, 700] top level
    b.cpu_op("aten::mm", 420, 80)  # nested: not counted again
    b.cpu_op("c10d::allreduce_", 600, 10)  # nested enqueue inside backward: carved out
    b.cpu_op("c10d::allreduce_", 750, 10)  # top-level enqueue: sync, not compute
    if named_thread:
        b.gloo("all_reduce", 605, 295, dims=[1000])  # [605, 900] on pt_gloo_runloop
    else:
        b.cpu_op("gloo:all_reduce", 605, 295, tid=GLOO_TID, cat="user_annotation", args={"Input Dims": [[1000]]})
    return b


@pytest.mark.parametrize("named_thread", [True, False], ids=["named-thread", "unnamed-thread"])
def test_cpu_only_gloo_classification(tmp_path, named_thread):
    """compute = top-level training-thread ops − nested c10d ops; gloo spans are comm.

    U(compute) = [100,300] ∪ [400,600] ∪ [610,700] = 490; U(comm) = [605,900] = 295;
    overlap = [610,700] = 90; busy = [100,300] ∪ [400,600] ∪ [605,900] = 695 → idle 305.
    """
    b = _gloo_trace(named_thread)
    t = load_trace(b.write(tmp_path / "raw.json"))
    kind = classify(t)
    names = [t.names[i] for i in t.name]
    assert {names[i] for i in range(len(t)) if kind[i] == COMM} == {"gloo:all_reduce"}
    assert {names[i] for i in range(len(t)) if kind[i] == SYNC} == {"c10d::allreduce_"}
    assert sorted(names[i] for i in range(len(t)) if kind[i] == COMPUTE) == [
        "aten::mm", "autograd::engine::evaluate_function: AddmmBackward0"]

    r = one(tmp_path, b)
    assert r.trace_kind == "cpu"
    (s,) = r.steps
    assert s.time_ms == approx(1.0)
    assert s.compute_ms == approx(0.490)
    assert s.comm_ms == approx(0.295)
    assert s.overlapped_comm_ms == approx(0.090)
    assert s.exposed_comm_ms == approx(0.205)
    assert s.idle_ms == approx(0.305)
    assert parts_sum(s) == approx(1.0)
    (c,) = r.comm_by_kind
    assert c.kind == "allreduce" and c.bytes == 4000  # Input Dims [1000] float32


@pytest.mark.parametrize("far", [None, 1e15, 4e15], ids=["none", "1e15us", "4e15us"])
def test_top_level_ops_exact_with_far_apart_timestamps(tmp_path, far):
    """Nesting is decided per thread; an event ~127 years away must not overflow that bookkeeping."""
    b = TraceBuilder(backend="gloo")
    b.step(1, 0, 1000)
    for k, tid in enumerate((100, 101, 102, 103)):
        b.cpu_op("aten::mm", 100 + k, 100, tid=tid)  # [100+k, 200+k]
        b.cpu_op("aten::add", 300 + k, 100, tid=tid)  # [300+k, 400+k]
    if far:
        b.cpu_op("aten::far_away", far, 1, tid=100)
    r = one(tmp_path, b)
    assert r.compute_ms == approx(0.206)  # [100, 203] ∪ [300, 403]


def test_gloo_reduce_scatter_labelled_from_enqueue(tmp_path):
    """gloo runs reduce_scatter as an all_reduce span; the c10d enqueue op names the collective."""
    b = TraceBuilder(backend="gloo")
    b.step(1, 0, 1000)
    b.cpu_op("c10d::_reduce_scatter_base_", 100, 5)
    b.gloo("all_reduce", 110, 100)
    b.cpu_op("c10d::allreduce_", 300, 5)
    b.gloo("all_reduce", 310, 100)
    r = one(tmp_path, b)
    kinds = sorted((c.kind, c.count) for c in r.comm_by_kind)
    assert kinds == [("allreduce", 1), ("reducescatter", 1)]


def test_cpu_busbw_uses_world_size_for_gloo(tmp_path):
    b = cpu_rank(0, world_size=4, steps=1)
    r = one(tmp_path, b)
    (c,) = r.comm_by_kind
    assert c.bytes == 4096 and c.group_size == 4
    assert c.algbw_gbps == pytest.approx(4096 / 300_000)
    assert c.busbw_gbps == pytest.approx(4096 / 300_000 * 1.5)


# ------------------------------------------------------------------------------------------------ memory


def test_memory_peak_and_op_at_peak(tmp_path):
    b = TraceBuilder(device_properties=[{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 << 30}])
    b.step(1, 0, 1000)
    b.cpu_op("aten::linear", 300, 200)  # [300, 500]
    b.cpu_op("aten::mm", 350, 100)  # [350, 450]: innermost at t = 400
    b.kernel("void k()", 100, 100, launch_at=10)
    for ts, alloc, res in [(100, 100, 512), (200, 300, 512), (250, 250, 1024), (400, 500, 1024), (600, 200, 768)]:
        b.memory(ts, alloc, res)
    b.memory(470, 7777, 9999, device_type=0, device_id=-1)  # CPU allocator: a device of its own
    r = one(tmp_path, b)
    mem = {m.device: m for m in r.memory}
    assert set(mem) == {"cuda:0", "cpu"}
    m = mem["cuda:0"]
    assert m.peak_allocated == 500 and m.peak_reserved == 1024
    assert m.peak_ms == approx(0.4)
    assert m.peak_op == "aten::mm"
    assert m.capacity == 80 << 30
    assert [p[1] for p in m.timeline] == [100, 300, 250, 500, 200]
    assert mem["cpu"].peak_allocated == 7777 and mem["cpu"].peak_op == "aten::linear"


def test_memory_2021_schema_running_sum_lower_bound(tmp_path):
    """Only signed Bytes (no totals): the running sum, lifted by its deepest dip, is a lower bound."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::empty", 0, 1000)
    for ts, nbytes in [(100, -100), (200, 300), (300, -150), (400, 50)]:
        b.memory(ts, None, nbytes=nbytes)
    r = one(tmp_path, b)
    (m,) = r.memory
    # running: -100, 200, 50, 100 → lifted by 100: 0, 300, 150, 200
    assert m.peak_allocated == 300 and m.peak_ms == approx(0.2)


# ------------------------------------------------------------------------------------------------ pipeline

U = 100_000  # one time unit of the hand-drawn timelines, in ns (100 µs)

# 1F1B, p = 2, m = 4, F = 1 unit, B = 2 units, free communication: makespan (m+p−1)(F+B) = 15, busy 12.
ONE_F_ONE_B_P2 = {
    0: "F0 0 1, F1 1 2, B0 4 6, F2 6 7, B1 7 9, F3 9 10, B2 10 12, B3 13 15",
    1: "F0 1 2, B0 2 4, F1 4 5, B1 5 7, F2 7 8, B2 8 10, F3 10 11, B3 11 13",
}
# 1F1B, p = 4, m = 4: makespan 7 × 3 = 21, busy 12 per stage, bubble 9/21 = 3/7 on every stage.
ONE_F_ONE_B_P4 = {
    0: "F0 0 1, F1 1 2, F2 2 3, F3 3 4, B0 10 12, B1 13 15, B2 16 18, B3 19 21",
    1: "F0 1 2, F1 2 3, F2 3 4, B0 8 10, F3 10 11, B1 11 13, B2 14 16, B3 17 19",
    2: "F0 2 3, F1 3 4, B0 6 8, F2 8 9, B1 9 11, F3 11 12, B2 12 14, B3 15 17",
    3: "F0 3 4, B0 4 6, F1 6 7, B1 7 9, F2 9 10, B2 10 12, F3 12 13, B3 13 15",
}


def _actions(table, step=1, offset=0):
    out = {}
    for stage, text in table.items():
        acts = []
        for item in text.split(", "):
            lab, s, e = item.split()
            acts.append(Action(step, stage, lab[0], int(lab[1:]), offset + int(s) * U, offset + int(e) * U))
        out[stage] = acts
    return out


@pytest.mark.parametrize("table, p", [(ONE_F_ONE_B_P2, 2), (ONE_F_ONE_B_P4, 4)], ids=["p2", "p4"])
def test_hand_drawn_timelines_respect_the_dependencies(table, p):
    """The tables themselves: F(s,mb) after F(s−1,mb); B(s,mb) after F(s,mb) and B(s+1,mb); no overlap."""
    acts = _actions(table)
    end = {(a.stage, a.kind, a.microbatch): a.end for r in acts for a in acts[r]}
    for r in acts:
        prev = 0
        for a in acts[r]:
            assert a.start >= prev
            prev = a.end
            deps = [(a.stage - 1, "F", a.microbatch)] if a.kind == "F" and a.stage else []
            if a.kind == "B":
                deps = [(a.stage, "F", a.microbatch)] + ([(a.stage + 1, "B", a.microbatch)] if a.stage < p - 1 else [])
            assert all(end[d] <= a.start for d in deps), (a, deps)


@pytest.mark.parametrize("table, p, m", [(ONE_F_ONE_B_P2, 2, 4), (ONE_F_ONE_B_P4, 4, 4)], ids=["p2", "p4"])
def test_bubble_measured_theory_replay_1f1b(table, p, m):
    theory = (p - 1) / (m + p - 1)
    makespan = (m + p - 1) * 3
    # two identical steps, the second 100 units later
    acts = _actions(table)
    for r, more in _actions(table, step=2, offset=100 * U).items():
        acts[r] += more
    res = analyse_pipeline(acts, [list(range(p))], "1f1b", m, 1)
    complete_pipeline(res, acts)
    assert res.stages == p and res.microbatches == m and res.stages_per_rank == 1
    assert res.theory == pytest.approx(theory)
    assert res.window_ms == pytest.approx(makespan * U / 1e6)
    assert len(res.stage_bubbles) == p
    for sb in res.stage_bubbles:
        assert sb.busy_ms == pytest.approx(12 * U / 1e6)
        assert sb.measured == pytest.approx(theory)  # 1 − busy / window
        assert sb.replay == pytest.approx(theory)
        assert sb.gap == pytest.approx(0.0, abs=1e-12)
    assert res.measured == pytest.approx(theory) and res.replay == pytest.approx(theory)
    assert res.imbalance == pytest.approx(0.0, abs=1e-12)
    # the prediction engine reproduces the formula for uniform stages at other m
    pred = {(x.schedule, x.microbatches): x for x in res.predictions}
    assert pred[("1f1b", 2 * m)].bubble == pytest.approx((p - 1) / (2 * m + p - 1))
    assert pred[("gpipe", m)].bubble == pytest.approx(theory)
    # interleaved (v = 2) is replayed and lands on its formula; zero-bubble has no order: formula only, never
    # a number in the replay column
    assert pred[("interleaved1f1b", m)].bubble == pytest.approx((p - 1) / (2 * m + p - 1))
    assert pred[("interleaved1f1b", m)].theory == pytest.approx((p - 1) / (2 * m + p - 1))
    assert pred[("zbv", m)].bubble is None and pred[("zbv", m)].step_ms is None
    assert pred[("zbv", 2 * m)].theory == 0.0


def test_bubble_measured_exceeds_replay_when_communication_delays(tmp_path):
    """Stage 1 of the p = 2 table starts every action 1 unit late (a p2p wait): measured > replay = theory."""
    acts = _actions(ONE_F_ONE_B_P2)
    late = {1: [Action(a.step, a.stage, a.kind, a.microbatch, a.start + U, a.end + U) for a in acts[1]]}
    # stage 0's B waits for stage 1's B, so those shift too
    s0 = []
    shift = 0
    for a in acts[0]:
        if a.kind == "B":
            shift = U
        s0.append(Action(a.step, a.stage, a.kind, a.microbatch, a.start + shift, a.end + shift))
    res = analyse_pipeline({0: s0, **late}, [[0, 1]], "1f1b", 4, 1)
    complete_pipeline(res, {0: s0, **late})
    assert res.window_ms == pytest.approx(16 * U / 1e6)
    for sb in res.stage_bubbles:
        assert sb.measured == pytest.approx(1 - 12 / 16)
        assert sb.replay == pytest.approx(0.2)
    assert "Measured − replay" in res.explanation


def test_theory_bubble_formulas():
    assert theory_bubble("gpipe", 4, 8) == pytest.approx(3 / 11)
    assert theory_bubble("1f1b", 4, 8) == pytest.approx(3 / 11)
    assert theory_bubble("interleaved1f1b", 4, 8, 2) == pytest.approx(3 / 19)
    assert theory_bubble("zbv", 4, 8, 2) == 0.0
    assert theory_bubble("1f1b", 1, 8) == 0.0


def test_predict_replay_matches_formula_for_uniform_stages():
    for sched in ("gpipe", "1f1b"):
        for p, m in ((2, 4), (4, 8), (8, 3)):
            cost = {(s, k): (1.0 if k == "F" else 2.0) for s in range(p) for k in ("F", "B")}
            rep = predict(sched, p, m, cost)
            assert rep.makespan == pytest.approx((m + p - 1) * 3.0)
            for b in rep.bubble.values():
                assert b == pytest.approx((p - 1) / (m + p - 1))
    # Megatron's interleaved 1F1B, v chunks per rank (each 1/v of the rank's layers): (p−1)/(v·m+p−1)
    for p, m, v in ((2, 4, 2), (4, 8, 2), (4, 4, 2), (4, 8, 3), (2, 2, 2), (4, 12, 2)):
        cost = {(s, k): (1.0 if k == "F" else 2.0) for s in range(p) for k in ("F", "B")}
        rep = predict("interleaved1f1b", p, m, cost, v)
        assert rep.makespan == pytest.approx((v * m + p - 1) * 3.0 / v)
        for b in rep.bubble.values():
            assert b == pytest.approx((p - 1) / (v * m + p - 1))
    assert predict("interleaved1f1b", 4, 6, {}, 2) is None  # m not a multiple of p: Megatron refuses it
    assert predict("zbv", 4, 8, {}, 2) is None


def _one_f_one_b_ranks(torch_spans: bool = False) -> list[TraceBuilder]:
    """Two CPU ranks running ONE_F_ONE_B_P2 with PP:{stage}{F|B}{mb} labels around the compute; stages from
    the mesh_pp group of pg_config. torch_spans: also torch's runtime spans, each from the previous action's
    end (the input wait) to its own end, around ours, plus an OVERLAP_F_B pair label."""
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]},
           {"pg_name": "1", "pg_desc": "mesh_pp", "pg_size": 2, "ranks": [0, 1]}]
    bs = []
    for stage, text in ONE_F_ONE_B_P2.items():
        b = TraceBuilder(rank=stage, world_size=2, backend="gloo", pg_config=pgs)
        b.step(1, 0, 2000)
        prev_end = 0
        for item in text.split(", "):
            lab, s, e = item.split()
            s, e = int(s) * 100, int(e) * 100
            if torch_spans:
                b.annotation(f"PP:{stage}{lab}", prev_end, e - prev_end)
            b.pp(stage, lab[0], int(lab[1:]), s, e)
            b.cpu_op("aten::mm", s, e - s)
            prev_end = e
        if torch_spans:
            b.annotation(f"PP:({stage}F9;{stage}B9)OVERLAP_F_B", 1900, 50)
        bs.append(b)
    return bs


def test_pipeline_end_to_end_from_pp_labels(tmp_path):
    a = analyse(tmp_path, *_one_f_one_b_ranks())
    p = a.pipeline
    assert p is not None
    assert p.schedule == "1f1b" and p.stages == 2 and p.microbatches == 4
    assert a.layout["pp"] == 2
    assert p.window_ms == approx(1.5)
    for sb in p.stage_bubbles:
        assert sb.measured == pytest.approx(0.2) and sb.theory == pytest.approx(0.2)
        assert sb.replay == pytest.approx(0.2)
    # actions come back on the common clock, in ms from the first action
    acts = {m.rank: m.pipeline_actions for m in a.ranks}
    assert (acts[1][0].kind, acts[1][0].start_ms, acts[1][0].end_ms) == ("F", approx(0.1), approx(0.2))


def test_pipeline_runtime_spans_with_waits_give_way_to_inner_compute_labels(tmp_path):
    """torch's runtime schedules label `PP:0F1` around the input wait and the compute; llmdiag's runs nest an
    equal label around the compute alone. The inner one is the action: the answer is the plain case's 0.2,
    where the outer spans would have hidden the waits (and an unparsed OVERLAP_F_B pair changes nothing)."""
    a = analyse(tmp_path, *_one_f_one_b_ranks(torch_spans=True))
    p = a.pipeline
    assert p is not None and p.microbatches == 4
    for sb in p.stage_bubbles:
        assert sb.measured == pytest.approx(0.2) and sb.replay == pytest.approx(0.2)
    assert all(len(m.pipeline_actions) == 8 for m in a.ranks)


# ------------------------------------------------------------------------------------------------ skew


def _skew_pair(shift_us=0, host1="host0"):
    """Rank 1 arrives 30, 20, 10 µs after rank 0; both finish together. Rank 1's clock reads shift_us more."""
    r0 = TraceBuilder(rank=0, world_size=2, host_name="host0")
    r1 = TraceBuilder(rank=1, world_size=2, host_name=host1, base_us=r0.base_us + shift_us)
    for b, starts in ((r0, (100, 300, 500)), (r1, (130, 320, 510))):
        b.step(1, 0, 1000)
        for k, s in enumerate(starts):
            e = 200 * (k + 1)
            b.nccl("allreduce", s, e - s, launch_at=10 + k, nelems=1024, group_size=2, pg_ranks=[0, 1])
    return r0, r1


def test_point_to_point_is_not_skew(tmp_path):
    """A pipeline's sends and receives: the receiver waits on its sender by design, and the n-th send of one
    rank has nothing to do with the n-th send of another. Only the allreduce is matched."""
    r0 = TraceBuilder(rank=0, world_size=2, host_name="host0")
    r1 = TraceBuilder(rank=1, world_size=2, host_name="host0")
    for b, starts in ((r0, (100, 300, 500)), (r1, (400, 600, 800))):
        b.step(1, 0, 1000)
        for k, s in enumerate(starts):
            for coll in ("send", "recv", "sendrecv"):
                b.nccl(coll, s + 10 * ("send", "recv", "sendrecv").index(coll), 5, launch_at=10 + k, nelems=64,
                       group_size=2, name=f"ncclDevKernel_SendRecv_{coll}(ncclDevKernelArgsStorage<4096ul>)")
    r0.nccl("allreduce", 900, 50, launch_at=50, nelems=1024, group_size=2, pg_ranks=[0, 1])
    r1.nccl("allreduce", 900, 50, launch_at=50, nelems=1024, group_size=2, pg_ranks=[0, 1])
    a = analyse(tmp_path, r0, r1)
    assert a.skew is not None and a.skew.matched == 1
    assert [c.kind for c in a.skew.by_collective] == ["allreduce"]
    assert a.skew.stragglers == [] and a.skew.last_arrivals == {}
    assert {c.kind for c in a.ranks[0].comm_by_kind} >= {"send", "recv", "sendrecv"}  # still counted as comm


def test_arrival_skew_and_last_arrival_straggler(tmp_path):
    a = analyse(tmp_path, *_skew_pair())
    sk = a.skew
    assert sk.matched == 3
    (c,) = sk.by_collective
    assert c.kind == "allreduce" and c.matched == 3
    assert c.mean_skew_ms == approx(0.020)
    assert c.max_skew_ms == approx(0.030)
    assert c.mean_transfer_ms == approx(0.080)  # the shortest duration: rank 1's 70, 80, 90 µs
    assert sk.last_arrivals == {"1": 3}
    # With two ranks one always arrives last: no arrival straggler (metrics/job/stragglers.py needs groups of 3).
    assert sk.stragglers == []
    assert sk.imposed_ms_by_rank == {"1": approx(0.060)}  # its start − the other's, summed: 10 + 20 + 30 µs


def test_simultaneous_arrivals_blame_nobody(tmp_path):
    """When all ranks start a collective at the same instant nobody arrived last (no straggler)."""
    a = analyse(tmp_path, gpu_rank(0, steps=3), gpu_rank(1, steps=3))
    assert a.skew.matched == 3
    assert a.skew.by_collective[0].max_skew_ms == 0.0
    assert a.skew.last_arrivals == {}
    assert a.skew.stragglers == []


def test_clock_alignment_of_two_hosts(tmp_path):
    """Rank 1 runs on another host whose clock is 5 s ahead: the shift is found and the skew is the true one."""
    a = analyse(tmp_path, *_skew_pair(shift_us=5_000_000, host1="host1"))
    sk = a.skew
    assert sk.host_shift_ms == {"host0": 0.0, "host1": pytest.approx(-5000.0)}
    (c,) = sk.by_collective
    assert c.mean_skew_ms == approx(0.020) and c.max_skew_ms == approx(0.030)
    assert sk.last_arrivals == {"1": 3}


def test_same_host_name_gets_no_shift(tmp_path):
    """On one host clocks are shared: a real 5 s offset is not 'aligned away'."""
    a = analyse(tmp_path, *_skew_pair(shift_us=5_000_000, host1="host0"))
    assert a.skew.host_shift_ms == {"host0": 0.0}
    assert a.skew.by_collective[0].mean_skew_ms == pytest.approx(5000.02)


def test_compute_straggler_above_median_by_5_percent(tmp_path):
    bs = []
    for r, mm in enumerate((500, 500, 600)):  # rank 2 computes 20 % more than the median
        b = TraceBuilder(rank=r, world_size=3, backend="gloo")
        b.step(1, 0, 1000)
        b.cpu_op("aten::mm", 100, mm)
        bs.append(b)
    a = analyse(tmp_path, *bs)
    assert [(s.rank, s.reason[:7]) for s in a.skew.stragglers] == [(2, "compute")]
    assert a.skew.stragglers[0].value == pytest.approx(0.2)
    # 4 % above the median is not a straggler
    bs[2].events = [e for e in bs[2].events if e["name"] != "aten::mm"]
    bs[2].cpu_op("aten::mm", 100, 520)
    a = analyse(tmp_path, *bs, sub="edge")
    assert a.skew is None or a.skew.stragglers == []


# ------------------------------------------------------------------------------------------------ intervals


def test_interval_algebra_exact():
    u = iv.union([0, 5, 20, 25, 40], [10, 15, 30, 30, 40])  # [0,15] [20,30]; the empty one vanishes
    assert u[0].tolist() == [0, 20] and u[1].tolist() == [15, 30]
    assert iv.total(u) == 25
    v = iv.union([10, 28], [22, 50])
    assert iv.intersect_total(u, v) == 5 + 2 + 2
    d = iv.difference(u, v)
    assert list(zip(d[0].tolist(), d[1].tolist())) == [(0, 10), (22, 28)]
    assert iv.union([0, 10], [10, 20])[0].tolist() == [0]  # touching intervals merge
    assert iv.overlap_each([0, 12], [12, 40], u).tolist() == [12 + 0, 3 + 10]


def test_cpu_memory_has_no_reserved_figure(tmp_path):
    """CPU memory events carry `Total Reserved` 0 (no caching allocator): the reserved peak is unknown (None, printed
    n/a), not 0 B, and the device's use is its allocated peak."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.cli.terminal import render

    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 100, 300)
    for ts, alloc in ((110, 1 << 20), (200, 3 << 20), (390, 1 << 20)):
        b.memory(ts, alloc, 0, device_type=0)
    a = analyze_path(b.write(tmp_path / "rank0.pt.trace.json"), jobs=1)
    (m,) = a.ranks[0].memory
    assert m.device == "cpu" and m.peak_allocated == 3 << 20 and m.peak_reserved is None and m.used == 3 << 20
    line = next(x for x in render(a).splitlines() if x.startswith("0 ") and "cpu" in x)
    assert "n/a" in line and "3.00" in line
