"""Scenarios as traces: the same planted problems written as Kineto events (tests/gen/builder.py), so the corpus
also runs the whole chain trace -> metrics (idle attribution, training evidence) -> rules, with sizes placed
to the microsecond.

Every step is 3 steps of one GPU rank: a healthy step keeps the device busy with kernels launched ahead
(queued), with backward and optimizer ops on the host. A planted problem opens a 2-3 ms gap in the middle of
the step under a known host activity, ended by a kernel launched at the gap's end (the host caused it).

`multi_rank_scenarios` adds the communication, pipeline, straggler and MoE problems as multi-rank GPU traces
(FSDP, TP, straggler, busbw written here; pipelines by tests/gen/pipeline.py, MoE by tests/gen/moe.py), each
with a silent twin, and each planted size computed by its generator from what it placed.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.gen.builder import TraceBuilder
from tests.gen.moe import moe_ep_ranks
from tests.gen.pipeline import Answer, Case
from tests.gen.pipeline import write as write_pipeline
from tests.gen.scenarios import Scenario

GAP = 2000  # µs of device idle a planted host problem opens per step


def _step(b: TraceBuilder, k: int, *, gap: str | None = None, training: bool = True, memcpy: int = 0) -> None:
    """Step k: host [k0, k0+10000]; kernels [k0+100, k0+4100] then (gap) [.., +5000]; what fills the gap."""
    k0 = (k - 1) * 10_000
    b.step(k, k0, k0 + 10_000)
    b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", k0 + 100, 4000, launch_at=k0 + 10)
    t = k0 + 4100
    if memcpy:
        b.memcpy(t, memcpy, launch_at=k0 + 11)
        t += memcpy
    end_gap = t + (GAP if gap else 0)
    if gap == "allocator":
        b.cpu_op("hipFree", t, GAP, cat="cuda_runtime")
    elif gap == "sync":
        b.cpu_op("aten::item", t, GAP)
        b.cpu_op("aten::_local_scalar_dense", t + 1, GAP - 2)
        b.cpu_op("cudaStreamSynchronize", t + 5, GAP - 10, cat="cuda_runtime")
    elif gap == "host":  # many short host ops, none holding the gap alone: launch-bound, not one slow op
        for j in range(GAP // 10):
            b.cpu_op("aten::add", t + 10 * j, 10)
    elif gap == "queued":  # the host is busy too, but the device waits on a dependency
        b.cpu_op("aten::add", t, GAP)
    elif gap == "loader":
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, GAP, cat="user_annotation")
    # "queued": the same gap, but the next kernel was launched at the step's start (waiting on a dependency)
    launch = k0 + 12 if gap in (None, "queued") else end_gap - 1
    b.kernel("flash_fwd_kernel", end_gap, 5000, launch_at=launch)
    if training:
        b.cpu_op("autograd::engine::evaluate_function: MmBackward0", k0 + 20, 50)
        b.cpu_op("Optimizer.step#AdamW.step", k0 + 80, 10)


def _trace(folder: Path, name: str, **kw) -> str:
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                                                               "computeMinor": 0, "totalGlobalMem": 80 * 2**30}])
    for k in (1, 2, 3):
        _step(b, k, **kw)
    return b.write(folder / name / "rank0.pt.trace.json.gz")


def multi_rank_scenarios(folder: Path) -> list[tuple[Scenario, str]]:
    """The communication, pipeline, straggler and MoE scenarios, each with its silent twin (the same trace with
    the problem removed); sizes from the generators above."""
    out = []

    def add(name: str, make, expect: set[str] | None = None, tol: float = 0.05, must_not: set[str] | None = None,
            gain_of=None) -> None:
        path = folder / name
        path.mkdir(parents=True)
        size = make(path)
        out.append((Scenario(name, None, expect or set(), size if expect and not gain_of else None, tol,
                             must_not or set(), gain_of), str(path)))

    add("trace_fsdp_allgather_exposed", lambda p: fsdp_allgather(p, prefetch=False), {"dp_overlap"})
    add("trace_fsdp_prefetched_silent", lambda p: fsdp_allgather(p, prefetch=True), must_not={"dp_overlap"})
    add("trace_tp_across_nodes", lambda p: tp_allreduce(p, across_nodes=True), {"tp_exposed"})
    add("trace_tp_in_node_silent", lambda p: tp_allreduce(p, across_nodes=False), must_not={"tp_exposed"})
    add("trace_throttled_host_straggler", lambda p: straggler(p, slow_us=70), {"stragglers"})
    add("trace_visible_straggler", lambda p: straggler(p, slow_us=300), {"stragglers"})
    add("trace_no_straggler_silent", lambda p: straggler(p, slow_us=0), must_not={"stragglers"})
    add("trace_low_busbw", lambda p: low_busbw(p, busbw_gbps=56.0), {"low_busbw"})
    add("trace_nvlink_busbw_silent", lambda p: low_busbw(p, busbw_gbps=300.0), must_not={"low_busbw"})
    add("trace_moe_imbalance", lambda p: moe_imbalance(p, hot=True), {"moe_imbalance"})
    add("trace_moe_balanced_silent", lambda p: moe_imbalance(p, hot=False), must_not={"moe_imbalance"})
    few = {}

    def few_microbatches(p):
        few["case"], few["ans"] = pipeline(p, "few_microbatches")

    def at_advised_m(f) -> float:  # the 1F1B window of what was placed, at the m the finding advises
        return bubble_gain(few["case"], few["ans"], int(re.search(r"--microbatches (\d+)", f.action).group(1)))

    add("trace_too_few_microbatches", few_microbatches, {"pipeline_bubble"}, tol=0.02, gain_of=at_advised_m)
    add("trace_slow_last_stage", lambda p: imbalance_gain(pipeline(p, "slow_last_stage")[1]),
        {"pipeline_imbalance"}, must_not={"stragglers"})
    add("trace_balanced_pipeline_silent", lambda p: pipeline(p, "balanced") and None,
        must_not={"pipeline_bubble", "pipeline_imbalance", "stragglers"})
    return out


def trace_scenarios(folder: Path) -> list[tuple[Scenario, str]]:
    """(scenario without its Analysis, trace folder); the caller analyses each folder."""
    ms = GAP / 1000
    cases = [
        (Scenario("trace_allocator_churn", None, {"allocator_churn"}, ms), {"gap": "allocator"}),
        (Scenario("trace_sync_heavy_host", None, {"host_sync"}, ms, must_not={"host_bound"}), {"gap": "sync"}),
        (Scenario("trace_host_bound", None, {"host_bound"}, ms), {"gap": "host"}),
        (Scenario("trace_dataloader", None, {"dataloader"}, ms, must_not={"host_bound"}), {"gap": "loader"}),
        (Scenario("trace_memcpy", None, {"exposed_memcpy"}, 1.5), {"memcpy": 1500}),
        (Scenario("trace_inference_host_bound", None, {"host_bound"}, ms, must_not={"memory_unused"}),
         {"gap": "host", "training": False}),
        (Scenario("trace_queued_gap_silent", None, must_not={"host_bound"}), {"gap": "queued"}),
        (Scenario("trace_healthy", None), {}),
    ]
    out = []
    for s, kw in cases:
        _trace(folder, s.name, **kw)
        out.append((s, str(folder / s.name)))
    return out + multi_rank_scenarios(folder)


# ---------------------------------------------------------------- multi-rank GPU scenarios
# Communication, pipeline, straggler and MoE problems as real multi-rank traces: every rank a TraceBuilder with
# H100 deviceProperties, DeviceMesh-named process groups in pg_config and on the NCCL kernels, the host
# launching the step's kernels ahead (queued, so no idle is the host's), backward and optimizer ops on the
# host. The planted size is computed below from the intervals placed, never read back from the analyzer.

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 80 * 2**30}]
H100_NVLINK_BUSBW = 360.0  # GB/s all-reduce busbw reachable on HGX H100 (what llmdiag's device table states)
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def _rank(r: int, n: int, pg: tuple[str, str, list[int]], host: str) -> TraceBuilder:
    name, desc, ranks = pg
    cfg = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": n,
            "ranks": list(range(n))},
           {"pg_name": name, "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": len(ranks), "ranks": ranks}]
    return TraceBuilder(rank=r, world_size=n, host_name=host, pg_config=cfg, device_properties=H100)


def _host_ops(b: TraceBuilder, k0: int, fsdp: bool = False) -> None:
    b.cpu_op("autograd::engine::evaluate_function: MmBackward0", k0 + 40, 20)
    b.cpu_op("Optimizer.step#AdamW.step", k0 + 70, 10)
    if fsdp:
        b.cpu_op("FSDP::all_gather", k0 + 30, 5)


class _Dev:
    """Device work of one step placed in order; launches go out at the step's start (queued work)."""

    def __init__(self, b: TraceBuilder, k0: int):
        self.b, self.k0, self.launch = b, k0, k0 + 1

    def kernel(self, start: int, dur: int, **kw) -> None:
        self.launch += 1
        self.b.kernel(kw.pop("name", GEMM), self.k0 + start, dur, stream=7, launch_at=self.launch, **kw)

    def nccl(self, coll: str, start: int, dur: int, pg: tuple[str, str, list[int]], nelems: int = 1 << 16,
             dtype: str = "BFloat16") -> None:
        self.launch += 1
        name, desc, ranks = pg
        self.b.nccl(coll, self.k0 + start, dur, stream=20, nelems=nelems, dtype=dtype, group_size=len(ranks),
                    pg_name=name, pg_desc=desc, pg_ranks=ranks, launch_at=self.launch)


def _write(builders: list[TraceBuilder], folder: Path) -> str:
    for b in builders:
        b.write(folder / f"rank{b.rank}.pt.trace.json.gz")
    return str(folder)


def fsdp_allgather(folder: Path, prefetch: bool, steps: int = 3, layers: int = 4, ag: int = 400,
                   gemm: int = 2000) -> float:
    """2 ranks, FSDP (pg `mesh_dp_shard`, `FSDP::` host ops): per layer an all-gather of its parameters, then
    the layer's GEMM. Not prefetched, each GEMM waits for its own all-gather: `layers × ag` exposed per step.
    Prefetched, the next layer's all-gather runs under this layer's GEMM: only the first one is exposed.
    Returns the planted size (ms per step): the exposed all-gather time, capped by the compute-only time."""
    pg = ("1", "mesh_dp_shard", [0, 1])
    bs = [_rank(r, 2, pg, "node0") for r in range(2)]
    step = layers * (ag + gemm) + 200
    for b in bs:
        for k in range(1, steps + 1):
            k0 = (k - 1) * step
            b.step(k, k0, k0 + step)
            _host_ops(b, k0, fsdp=True)
            d, t = _Dev(b, k0), 100
            if prefetch:
                d.nccl("allgather", t, ag, pg)
                t += ag
                for layer in range(layers):
                    if layer + 1 < layers:
                        d.nccl("allgather", t, ag, pg)
                    d.kernel(t, gemm)
                    t += gemm
            else:
                for _ in range(layers):
                    d.nccl("allgather", t, ag, pg)
                    d.kernel(t + ag, gemm)
                    t += ag + gemm
    _write(bs, folder)
    exposed = ag * (1 if prefetch else layers)
    return min(exposed, layers * gemm - (0 if not prefetch else (layers - 1) * ag)) / 1000


def tp_allreduce(folder: Path, across_nodes: bool, steps: int = 3, layers: int = 4, gemm: int = 1500,
                 ar: int = 600, ar_nvlink: int = 60) -> float:
    """2 ranks of tensor parallelism (pg `mesh_tp`): per layer a GEMM, then the all-reduce of its output, which
    the next GEMM needs (no overlap). Across nodes (hosts node0, node1) the all-reduce takes `ar`; in one node
    over NVLink `ar_nvlink` (the silent twin: under 5 % of the step). Planted size: layers × ar."""
    pg = ("2", "mesh_tp", [0, 1])
    cost = ar if across_nodes else ar_nvlink
    bs = [_rank(r, 2, pg, f"node{r}" if across_nodes else "node0") for r in range(2)]
    step = layers * (gemm + cost) + 200
    for b in bs:
        for k in range(1, steps + 1):
            k0 = (k - 1) * step
            b.step(k, k0, k0 + step)
            _host_ops(b, k0)
            d, t = _Dev(b, k0), 100
            for _ in range(layers):
                d.kernel(t, gemm)
                d.nccl("allreduce", t + gemm, cost, pg)
                t += gemm + cost
    _write(bs, folder)
    return min(layers * cost, layers * gemm) / 1000


def straggler(folder: Path, slow_us: int, slow_rank: int = 2, n: int = 4, steps: int = 3, gemm: int = 2000,
              ar: int = 30) -> float:
    """n ranks on n hosts (pg `mesh_dp_replicate`): per step two compute phases each ended by an all-reduce the
    next phase needs. Rank `slow_rank`'s GPU is throttled: each phase takes `slow_us` longer, so it arrives
    last at every all-reduce and the others wait `slow_us` there (an all-reduce ends `ar` after the last
    arrival). Planted size: the waiting it imposes per step, 2 × slow_us."""
    pg = ("3", "mesh_dp_replicate", list(range(n)))
    bs = [_rank(r, n, pg, f"node{r}") for r in range(n)]
    step = 2 * (gemm + slow_us + ar) + 200
    for b in bs:
        mine = gemm + (slow_us if b.rank == slow_rank else 0)
        for k in range(1, steps + 1):
            k0 = (k - 1) * step
            b.step(k, k0, k0 + step)
            _host_ops(b, k0)
            d, t = _Dev(b, k0), 100
            for _ in range(2):
                d.kernel(t, mine)
                arrive, done = t + mine, t + gemm + slow_us + ar  # everyone leaves `ar` after the last arrival
                d.nccl("allreduce", arrive, done - arrive, pg)
                t = done
    _write(bs, folder)
    return 2 * slow_us / 1000


def low_busbw(folder: Path, busbw_gbps: float, steps: int = 3, gemm: int = 2000, hidden: int = 900,
              nelems: int = 32 << 20) -> float:
    """2 ranks in one node (pg `mesh_dp_replicate`): per step two GEMMs, each followed by a 64 MiB bf16
    all-reduce launched `hidden` µs before the GEMM ends (the rest exposed), as DDP buckets. At `busbw_gbps`
    the all-reduce takes bytes / busbw (2 ranks: busbw = algbw). Planted size: its exposed time × (1 − busbw /
    (0.8 × the H100 NVLink busbw)), the low_busbw formula on the placed numbers; 0 when busbw is not low."""
    pg = ("3", "mesh_dp_replicate", [0, 1])
    nbytes = nelems * 2
    ar = round(nbytes / (busbw_gbps * 1e3))  # µs
    exposed = max(0, ar - hidden)
    bs = [_rank(r, 2, pg, "node0") for r in range(2)]
    step = 2 * (gemm + exposed) + 200
    for b in bs:
        for k in range(1, steps + 1):
            k0 = (k - 1) * step
            b.step(k, k0, k0 + step)
            _host_ops(b, k0)
            d, t = _Dev(b, k0), 100
            for _ in range(2):
                d.kernel(t, gemm)
                d.nccl("allreduce", t + gemm - min(hidden, ar), ar, pg, nelems=nelems)
                t += gemm + exposed
    _write(bs, folder)
    bw = nbytes / ar / 1e3  # the busbw of what was placed (rounded µs)
    return 2 * exposed * (1 - bw / (0.8 * H100_NVLINK_BUSBW)) / 1000


def moe_imbalance(folder: Path, hot: bool, n: int = 4, rows: int = 2500) -> float:
    """An EP group of n ranks (tests/gen/moe.py, pg `mesh_ep`, split sizes on the all-to-alls). Hot: every rank's
    router sends rank 0 twice its share (2·rows/n rows, the rest spread over the others: rank 0 receives 5000
    rows per layer, the others 1664, max/mean 2.0); balanced twin: every rank sends rows/n to every rank.
    Dispatch/combine are short (30 + 25 µs per layer) against the expert GEMMs, so only the imbalance is a
    problem. Planted size: the hot rank's expert time
    brought to the mean, expert_ms[hot] × (1 − mean/max) from the rows placed."""
    if hot:
        send = [[2 * rows // n if d == 0 else (rows - 2 * rows // n) // (n - 1) for d in range(n)] for _ in range(n)]
    else:
        send = [[rows // n] * n for _ in range(n)]
    recv = [sum(send[s][d] for s in range(n)) for d in range(n)]
    step = 4 * (30 + round(max(recv) * 0.5) + 25 + 50) + 200  # 4 layers at 0.5 µs per row (gen_moe's defaults)
    builders, exp = moe_ep_ranks(send, dispatch_us=30, combine_us=25, steps=2, step_us=step)
    _write(builders, folder)
    i = max(range(n), key=recv.__getitem__)
    return exp.expert_ms[i] * (1 - (sum(recv) / n) / recv[i])


PIPE = {  # name -> gen_pipeline Case: 4 stages on ranks 0-3 (hosts node0), 1F1B
    "few_microbatches": Case(p=4, m=4),
    "slow_last_stage": Case(p=4, m=16, slow_stage=3),
    "balanced": Case(p=4, m=16),
}


def pipeline(folder: Path, which: str) -> tuple[Case, Answer]:
    c = PIPE[which]
    return c, write_pipeline(c, folder)


def bubble_gain(c: Case, ans: Answer, m2: int) -> float:
    """The 1F1B window at m′ microbatches (same busy time per microbatch): the window shrinks from
    busy·(m+p−1)/m to busy·(m′+p−1)/m′; ans.window_us is the simulated window of what was placed."""
    return ans.window_us / 1000 * (1 - ((m2 + c.p - 1) / m2) / ((c.m + c.p - 1) / c.m))


def imbalance_gain(ans: Answer) -> float:
    """Slowest stage's busy time → the mean stage's, from the simulated (placed) actions."""
    busy = list(ans.busy_us.values())
    return (max(busy) - sum(busy) / len(busy)) / 1000
