"""Scenarios as traces: the same planted problems written as Kineto events (tests/builder.py), so the corpus
also runs the whole chain trace -> metrics (idle attribution, training evidence) -> rules, with sizes placed
to the microsecond.

Every step is 3 steps of one GPU rank: a healthy step keeps the device busy with kernels launched ahead
(queued), with backward and optimizer ops on the host. A planted problem opens a 2-3 ms gap in the middle of
the step under a known host activity, ended by a kernel launched at the gap's end (the host caused it).
"""

from __future__ import annotations

from pathlib import Path

from tests.builder import TraceBuilder
from tests.gen_scenarios import Scenario

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
    elif gap in ("host", "queued"):  # queued: the host is busy too, but the device waits on a dependency
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
    return out
