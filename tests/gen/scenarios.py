"""A corpus of realistic GPU scenarios, each with one planted problem of known size, plus variants that must stay
silent (issue 14 item 6). Every scenario is a typed `Analysis` (the metrics' output) built from the healthy run of
tests/gen/summaries.py with one thing changed; its planted gain is computed here from the planted numbers by the
formula of the problem (exposed time, bubble formula at the new m, busbw at the link peak), not by the rules.

Run `python -m tests.gen.scenarios` for the confusion table docs/recommendations.md carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from llmdiag.diagnose.model.analysis import Analysis, CollectiveSkew, SkewResult
from llmdiag.diagnose.model.idle import IdleBreakdown, TrainingEvidence
from tests.gen.summaries import _steps, aggregate, analysis

FP32_SPEEDUP = 4.0  # bf16 over fp32 GEMM assumed by the planted fp32 problem (the rule's documented constant)


@dataclass
class Scenario:
    name: str
    a: Analysis
    expect: set[str] = field(default_factory=set)  # rule ids accepted as the top finding; empty = must stay silent
    gain_ms: float | None = None  # planted size (per step)
    tol: float = 0.05  # relative tolerance of the finding's gain against gain_ms
    must_not: set[str] = field(default_factory=set)  # rule ids that must not fire at all
    gain_of: Callable | None = None  # planted size given the top finding (the size depends on the advised setting)


def _set(r, *, compute_only=80.0, overlapped=12.0, exposed=2.0, other=1.0, idle=5.0, host_bound=None, **idle_kw):
    """Rewrite one rank's per-step breakdown (and its comm stats' overlap) from the five parts."""
    parts = {"compute_only": compute_only, "overlapped": overlapped, "exposed": exposed, "other": other, "idle": idle}
    r.steps = _steps(len(r.steps), 3.0, parts)
    s = r.steps[0]
    r.step_time_ms, r.compute_ms, r.comm_ms = s.time_ms, s.compute_ms, s.comm_ms
    r.overlapped_comm_ms, r.exposed_comm_ms, r.compute_only_ms = overlapped, exposed, compute_only
    r.other_ms, r.idle_ms, r.overlap_ratio = other, idle, s.overlap_ratio
    r.exposed_comm_frac, r.idle_frac = exposed / s.time_ms, idle / s.time_ms
    r.hints.device_idle_frac = idle / s.time_ms
    n = r.nsteps
    for c in r.comm_by_kind:
        c.total_ms, c.overlapped_ms = (overlapped + exposed) * n, overlapped * n
        c.overlap_ratio = overlapped / (overlapped + exposed) if overlapped + exposed else None
    hb = idle * 0.6 if host_bound is None else host_bound
    r.idle = IdleBreakdown(idle_ms=idle, host_bound_ms=hb, **idle_kw)
    r.idle.unattributed_ms = max(0.0, idle - hb - sum(v for k, v in idle_kw.items() if k.endswith("_ms")))


def _finish(a: Analysis) -> Analysis:
    a.aggregate = aggregate(a.ranks, tokens_per_step=131072 * len(a.ranks))
    return a


def base(n: int = 8, *, pipeline: bool = False, with_manifest: bool = True, **parts) -> Analysis:
    """The healthy run: 8 ranks (dp=4 × tp=2) on H100s, ~100 ms steps, 12 % of comm exposed at most, training."""
    a = analysis(n, pipeline=pipeline, with_manifest=with_manifest)
    a.issues = []
    for r in a.ranks:
        r.training = TrainingEvidence(backward_ops=300.0, optimizer_ops=1.0, ddp_ops=1.0)
        _set(r, exposed=2.0 + (r.rank % 3) * 0.2, idle=5.0 + (r.rank % 4) * 0.3, **parts)
    return _finish(a)


def _comm(a: Analysis, kind: str, pg: str, **kw) -> None:
    for r in a.ranks:
        for c in r.comm_by_kind:
            c.kind, c.pg = kind, pg
            for k, v in kw.items():
                setattr(c, k, v)


def _all(a: Analysis, **parts) -> Analysis:
    for r in a.ranks:
        _set(r, **parts)
    return _finish(a)


def scenarios() -> list[Scenario]:
    """The typed scenarios. The communication (FSDP, TP, low busbw), pipeline (bubble, slow stage), straggler and
    MoE-imbalance problems are written as multi-rank Kineto traces in tests/gen/scenario_traces.py instead."""
    out = []
    # 1. DataLoader-bound: 30 % of the step in __next__, 25 ms of device idle under it
    a = base()
    for r in a.ranks:
        _set(r, idle=30.0, host_bound=2.0, dataloader_ms=25.0)
        r.hints.dataloader_frac = 0.30
    out.append(Scenario("dataloader_bound", _finish(a), {"dataloader"}, 25.0))
    # 2. Launch-bound: 30 ms idle, 28 under host ops, 80 % of kernels under 10 µs
    a = base()
    for r in a.ranks:
        _set(r, idle=30.0, host_bound=28.0)
        r.hints.short_kernel_frac, r.hints.median_kernel_us = 0.8, 6.0
    out.append(Scenario("launch_bound", _finish(a), {"host_bound"}, 28.0))
    # 3. True fp32 GEMMs: half the compute kernel time; gain = frac × compute × (1 − 1/4)
    a = base()
    for r in a.ranks:
        r.hints.fp32_gemm_frac, r.hints.compute_capability = 0.5, 9.0
    out.append(Scenario("fp32_gemms", a, {"fp32_gemm"}, 0.5 * a.ranks[0].compute_ms * (1 - 1 / FP32_SPEEDUP)))
    # 4. Allocator churn: 35 ms in hipFree + 2 ms in hipMalloc per step
    a = base()
    for r in a.ranks:
        _set(r, idle=40.0, host_bound=1.0, runtime_ms=37.0, runtime_ops={"hipFree": 35.0, "hipMalloc": 2.0},
             runtime_calls={"hipFree": 1298.0, "hipMalloc": 1458.0})
    out.append(Scenario("allocator_churn", _finish(a), {"allocator_churn"}, 37.0))
    # 5. Sync-heavy host: 57 aten::item + 10 cudaStreamSynchronize per step, 20 ms of idle under them; the
    #     kernels are short, but torch.compile/CUDA graphs would not remove this idle: host_bound must not fire
    a = base()
    for r in a.ranks:
        _set(r, idle=22.0, host_bound=1.0, runtime_ms=20.0,
             runtime_ops={"aten::item": 18.0, "cudaStreamSynchronize": 2.0},
             runtime_calls={"aten::item": 57.0, "cudaStreamSynchronize": 10.0})
        r.hints.short_kernel_frac = 0.8
    out.append(Scenario("sync_heavy_host", _finish(a), {"host_sync"}, 20.0, must_not={"host_bound"}))
    # 6. MoE all-to-all on the expert group, 16 ms exposed (imbalance itself is engineer D's moe_imbalance)
    a = base()
    a.layout = {"dp": 4, "fsdp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 2}
    _comm(a, "alltoall", "mesh_ep", group_size=2)
    out.append(Scenario("moe_alltoall_exposed", _all(a, exposed=16.0), {"exposed_comm", "moe_imbalance"}, 16.0))
    # 7. CPU offload: 12 ms of H2D/D2H copies per step that nothing overlaps
    out.append(Scenario("cpu_offload_memcpy", _all(base(), other=12.0), {"exposed_memcpy"}, 12.0))
    # 8. Inference (vLLM-like, foreign trace): no backward/optimizer, 30 % memory, launch-bound decode
    a = base(with_manifest=False)
    for r in a.ranks:
        _set(r, idle=30.0, host_bound=28.0)
        r.training = TrainingEvidence()
        r.hints.short_kernel_frac = 0.8
        for m in r.memory:
            m.peak_reserved = m.peak_allocated = int(0.3 * m.capacity)
    out.append(Scenario("inference_trace", _finish(a), {"host_bound"}, 28.0,
                        must_not={"memory_unused", "dp_overlap", "pipeline_bubble", "stragglers"}))
    # 9. DDP whose gradients (2.48 MB) fit one bucket: 9 ms exposed is reported, no bucket_cap_mb advice
    a = base()
    _comm(a, "allreduce", "mesh_dp", bytes=int(2.48e6 / 8) * 24)
    out.append(Scenario("ddp_small_gradients", _all(a, exposed=9.0), {"exposed_comm"}, 9.0, must_not={"dp_overlap"}))
    # ---- must stay silent (no high or medium finding)
    out.append(Scenario("healthy", base()))
    out.append(Scenario("healthy_pipeline", base(8, pipeline=True)))
    a = base(2)
    a.skew = SkewResult(matched=24, by_collective=[], last_arrivals={"1": 16, "0": 8}, host_shift_ms={},
                        stragglers=[])
    a.skew.by_collective = [CollectiveSkew("mesh_dp", "allreduce", 24, 0.9, 2.0, 1.0)]
    out.append(Scenario("two_rank_chance_straggler", a, must_not={"stragglers"}))
    a = base()
    a.ranks[4].compute_ms += 0.07  # 70 µs more compute in a ~100 ms step
    out.append(Scenario("noise_compute_straggler", a, must_not={"stragglers"}))
    a = base()
    for r in a.ranks:  # idle only at the capture's edges: nothing the job can change
        _set(r, idle=30.0, host_bound=1.0, edge_ms=28.0)
        r.hints.short_kernel_frac = 0.8
    out.append(Scenario("capture_edges_only", _finish(a), must_not={"host_bound"}))
    a = base()
    _comm(a, "allreduce", "mesh_dp", bytes=int(2.48e6 / 8) * 24)
    out.append(Scenario("ddp_small_gradients_hidden", a, must_not={"dp_overlap"}))
    return out


if __name__ == "__main__":
    from tests.unit.rules.test_scenarios import confusion_markdown, scenario_markdown

    print(scenario_markdown())
    print()
    print(confusion_markdown())
