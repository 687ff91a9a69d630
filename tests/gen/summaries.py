"""Synthetic `Analysis` objects with chosen numbers, for the report and rule tests.

`analysis()` builds a healthy run on which no rule fires; tests then change one number in the dict from
`summary()` to trigger one rule. Built from diagnose/model/analysis.py's dataclasses so a schema change breaks here.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import (Aggregate, Analysis, AnalysisOptions, CollectiveSkew, CommGroupStats, Hints,
                                     Issue, KernelStat, MemoryStat, PipelineAction, PipelinePrediction,
                                     PipelineResult, RankMetrics, SkewResult, StageBubble, StepBreakdown)
from llmdiag.diagnose.model.summary import manifest_from_dict

GIB = 2**30
EVIL = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "{{ 7*7 }}", "$x^2$ & 'q'"]


def _steps(n: int, t0: float, parts: dict) -> list[StepBreakdown]:
    time = sum(parts.values())
    comm = parts["overlapped"] + parts["exposed"]
    return [StepBreakdown(step=10 + i, start_ms=t0 + i * time, time_ms=time,
                          compute_ms=parts["compute_only"] + parts["overlapped"], comm_ms=comm,
                          overlapped_comm_ms=parts["overlapped"], exposed_comm_ms=parts["exposed"],
                          compute_only_ms=parts["compute_only"], other_ms=parts["other"], idle_ms=parts["idle"],
                          overlap_ratio=parts["overlapped"] / comm if comm else None) for i in range(n)]


def one_f_one_b(p: int, m: int, f_ms: float, b_ms: float, t0: float = 0.0, steps: int = 1,
                gap_ms: float = 5.0) -> dict[int, list[PipelineAction]]:
    """1F1B action times per stage (list scheduling with F/B dependencies), `steps` times in a row."""
    out = {s: [] for s in range(p)}
    for _ in range(steps):
        orders = {}
        for s in range(p):
            warm = min(p - s - 1, m)
            o = [("F", i) for i in range(warm)]
            f, b = warm, 0
            while b < m:
                if f < m:
                    o.append(("F", f))
                    f += 1
                o.append(("B", b))
                b += 1
            orders[s] = o
        done, free, idx = {}, {s: t0 for s in range(p)}, {s: 0 for s in range(p)}
        while any(idx[s] < len(orders[s]) for s in range(p)):
            for s in range(p):
                while idx[s] < len(orders[s]):
                    k, mb = orders[s][idx[s]]
                    dep = (s - 1, "F", mb) if k == "F" and s > 0 else (s + 1, "B", mb) if k == "B" and s < p - 1 \
                        else (s, "F", mb) if k == "B" else None
                    if dep and dep not in done:
                        break
                    start = max(free[s], done.get(dep, t0))
                    end = start + (f_ms if k == "F" else b_ms)
                    done[(s, k, mb)] = end
                    free[s] = end
                    out[s].append(PipelineAction(stage=s, kind=k, microbatch=mb, start_ms=start, end_ms=end))
                    idx[s] += 1
        t0 = max(free.values()) + gap_ms
    return out


def rank_metrics(rank: int, *, gpu: bool = True, n_steps: int = 3, parts: dict | None = None, pg: str = "mesh_dp",
                 host: str | None = None, names: list[str] | None = None, memory: bool = True,
                 comm: bool = True) -> RankMetrics:
    parts = parts or {"compute_only": 80.0, "overlapped": 12.0, "exposed": 2.0 + (rank * 5 % 11) * 0.15,
                      "other": 1.0, "idle": 5.0 + (rank * 7 % 13) * 0.3}  # deterministic spread over ranks
    if not comm:
        parts = dict(parts, compute_only=parts["compute_only"] + parts["overlapped"] + parts["exposed"],
                     overlapped=0.0, exposed=0.0)
    steps = _steps(n_steps, 3.0, parts)
    step = steps[0].time_ms
    nm = names or []
    cbk = []
    if comm:
        tot = (parts["overlapped"] + parts["exposed"]) * n_steps
        cbk = [CommGroupStats(kind="allreduce", pg=pg, count=8 * n_steps, total_ms=tot,
                              overlapped_ms=parts["overlapped"] * n_steps, overlap_ratio=parts["overlapped"] / (
                                  parts["overlapped"] + parts["exposed"]), bytes=8 * n_steps * 100 * 2**20,
                              sized_count=8 * n_steps, algbw_gbps=160.0, busbw_gbps=280.0, group_size=8)]
    kernels = [KernelStat(name=(nm[0] if nm else "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
                          kind="compute", count=300, total_ms=150.0 + rank, mean_us=500.0, max_us=900.0, share=0.5),
               KernelStat(name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", kind="comm", count=24, total_ms=42.0,
                          mean_us=1750.0, max_us=2100.0, share=0.14),
               KernelStat(name=(nm[1] if len(nm) > 1 else "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>"),
                          kind="compute", count=96, total_ms=60.0, mean_us=625.0, max_us=700.0, share=0.2)]
    mem = []
    if memory and gpu:
        tl = [[i * step * n_steps / 50, (20 + 20 * (i % 10) / 9) * GIB, 52 * GIB] for i in range(51)]
        mem = [MemoryStat(device="cuda:0", peak_allocated=40 * GIB + rank * 2**20, peak_reserved=52 * GIB,
                          peak_ms=tl[9][0], peak_op=(nm[2] if len(nm) > 2 else "aten::mm"), capacity=80 * GIB,
                          timeline=tl)]
    hints = Hints(kernels_per_step=2000.0 if gpu else 300.0, median_kernel_us=50.0 if gpu else None,
                  short_kernel_frac=0.2 if gpu else None, device_idle_frac=0.05 if gpu else None,
                  dataloader_frac=0.01, fp32_gemm_frac=0.0 if gpu else None, compute_capability=9.0 if gpu else None)
    return RankMetrics(
        rank=rank, file=(nm[3] if len(nm) > 3 else f"traces/rank{rank}.pt.trace.json.gz"),
        host=host or f"node{rank // 8}", trace_kind="gpu" if gpu else "cpu", steps=steps, step_time_ms=step,
        compute_ms=steps[0].compute_ms, comm_ms=steps[0].comm_ms, overlapped_comm_ms=parts["overlapped"],
        exposed_comm_ms=parts["exposed"], compute_only_ms=parts["compute_only"], other_ms=parts["other"],
        idle_ms=parts["idle"], overlap_ratio=steps[0].overlap_ratio, exposed_comm_frac=parts["exposed"] / step,
        idle_frac=parts["idle"] / step, comm_by_kind=cbk, top_kernels=kernels, memory=mem, hints=hints,
        coords={"dp": rank}, warnings=[])


def manifest(world: int, layout: dict, *, gpu: bool = True, pipeline: dict | None = None, host=None) -> dict:
    return {
        "schema_version": 1, "workload": "".join(f"{k}{v}" for k, v in layout.items() if v > 1) or "single",
        "layout": layout, "world_size": world, "mesh_dim_names": [k for k, v in layout.items() if v > 1],
        "ranks": {str(r): {"host": host or f"node{r // 8}"} for r in range(world)}, "pipeline": pipeline,
        "batch": {"global_batch": 64 * world, "micro_batch": 4, "seq_len": 2048}, "tokens_per_step": 131072 * world,
        "backend": "nccl" if gpu else "gloo",
        "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * GIB, "peak_flops": 989e12,
                   "count": 8} if gpu else {"type": "cpu", "name": "cpu", "memory_bytes": None, "peak_flops": None,
                                             "count": world},
        "dtype": "bfloat16" if gpu else "float32", "torch_version": "2.13.0", "llmdiag_version": "0.1.0",
        "options": {"bucket_cap_mb": 25.0, "sp": False, "reshard_after_forward": None, "global_batch": 64 * world},
        "cpu_cores": 2 if not gpu else 128, "oversubscribed": False, "status": "ok",
        "command": ["llmdiag", "run", "--workload", "x"],
    }


def pipeline_result(p: int, m: int, ranks_of_stage: list[int], measured: float = 0.12) -> PipelineResult:
    theory = (p - 1) / (m + p - 1)
    sb = [StageBubble(stage=s, rank=r, busy_ms=80.0 - 2 * s, measured=measured + 0.01 * s, replay=theory + 0.01,
                      theory=theory, gap=measured + 0.01 * s - theory) for s, r in enumerate(ranks_of_stage)]
    preds = [PipelinePrediction(schedule="1f1b", microbatches=mm, bubble=(p - 1) / (mm + p - 1),
                                step_ms=70.0 * (mm + p - 1) / mm, theory=(p - 1) / (mm + p - 1))
             for mm in (m // 2 or 1, m, 2 * m, 4 * m)]
    preds.append(PipelinePrediction(schedule="interleaved1f1b", microbatches=m, bubble=(p - 1) / (2 * m + p - 1),
                                    step_ms=None, theory=(p - 1) / (2 * m + p - 1)))
    mean_measured = sum(b.measured for b in sb) / len(sb)
    return PipelineResult(schedule="1f1b", stages=p, stages_per_rank=1, microbatches=m, window_ms=92.0,
                          replay_window_ms=70.0 * (m + p - 1) / m, stage_bubbles=sb, measured=mean_measured,
                          replay=theory + 0.01, theory=theory, imbalance=0.05,
                          explanation=f"Measured bubble {mean_measured:.1%} against {theory:.1%} from the formula.",
                          predictions=preds)


def aggregate(ranks: list[RankMetrics], tokens_per_step: int | None = None, gpu: bool = True) -> Aggregate:
    """The cross-rank aggregate the analyzer would compute, from the ranks themselves."""
    n = len(ranks)
    step = sum(r.step_time_ms for r in ranks) / n
    ov = [(r.overlap_ratio, r.rank) for r in ranks if r.overlap_ratio is not None]
    peaks = [(m.peak_allocated, r.rank) for r in ranks for m in r.memory]
    return Aggregate(ranks=n, step_time_ms=step, step_time_max_ms=max(r.step_time_ms for r in ranks),
                     overlap_ratio_min=min(ov)[0] if ov else None,
                     overlap_ratio_mean=sum(o for o, _ in ov) / len(ov) if ov else None,
                     overlap_worst_rank=min(ov)[1] if ov else None,
                     exposed_comm_frac_mean=sum(r.exposed_comm_frac for r in ranks) / n,
                     exposed_comm_frac_max=max(r.exposed_comm_frac for r in ranks),
                     idle_frac_mean=sum(r.idle_frac for r in ranks) / n,
                     compute_frac_mean=sum(r.compute_ms / r.step_time_ms for r in ranks) / n,
                     memory_peak_max=max(peaks)[0] if peaks else None,
                     memory_peak_rank=max(peaks)[1] if peaks else None,
                     tokens_per_s=tokens_per_step / (step / 1e3) if tokens_per_step else None,
                     mfu=0.41 if gpu and tokens_per_step else None,
                     achieved_tflops_per_device=405.5 if gpu and tokens_per_step else None)


def analysis(n: int = 8, *, gpu: bool = True, pipeline: bool = False, comm: bool = True, memory: bool = True,
             with_manifest: bool = True, evil: bool = False) -> Analysis:
    """A healthy run: no rule fires. `evil` puts injection strings into every trace-derived string."""
    pp = 2 if pipeline else 1
    tp = 2 if n >= 8 else 1
    layout = {"dp": n // (pp * tp), "fsdp": 1, "tp": tp, "pp": pp, "cp": 1}
    names = EVIL if evil else None
    host = EVIL[1] if evil else None
    ranks = [rank_metrics(r, gpu=gpu, pg=EVIL[0] if evil else "mesh_dp", host=host, names=names, memory=memory,
                          comm=comm) for r in range(n)]
    pres = None
    if pipeline:
        m = 4 * pp
        acts = one_f_one_b(pp, m, 2.0, 4.0, t0=3.0, steps=3)
        stage_rank = [s * tp for s in range(pp)]  # one pipeline replica: dp=0, tp=0
        for r in ranks:
            s = (r.rank // tp) % pp
            r.pipeline_actions = acts[s]
            r.coords = {"pp": s, "tp": r.rank % tp, "dp": r.rank // (tp * pp)}
        pres = pipeline_result(pp, m, stage_rank)
    agg = aggregate(ranks, tokens_per_step=131072 * n if with_manifest else None, gpu=gpu)
    skew = SkewResult(matched=24, by_collective=[CollectiveSkew(pg=EVIL[0] if evil else "mesh_dp", kind="allreduce",
                                                                matched=24, mean_skew_ms=0.05, max_skew_ms=0.2,
                                                                mean_transfer_ms=1.5)],
                      last_arrivals={str(r): 3 for r in range(n)}, host_shift_ms={(host or "node0"): 0.0},
                      stragglers=[]) if comm else None
    man = manifest(n, layout, gpu=gpu, host=host, pipeline={"schedule": "1f1b", "microbatches": 4 * pp,
                                                            "stages": pp, "stages_per_rank": 1, "pp": pp}
                   if pipeline else None) if with_manifest else None
    if man and evil:
        man["workload"] = EVIL[0]
        man["device"]["name"] = EVIL[1] + " H100"
    man = manifest_from_dict(man, "test") if man else None
    issues = [Issue(file=EVIL[3] if evil else "traces/rank9.pt.trace.json.gz",
                    message=EVIL[0] + EVIL[2] if evil else "truncated gzip stream; rank left out", rank=9,
                    severity="error")] if n == 8 else []
    return Analysis(source=EVIL[1] if evil else "runs/demo", name=EVIL[2] if evil else "demo", trace_kind="gpu" if gpu
                    else "cpu", world_size=n, layout=layout, manifest=man, ranks=ranks, ranks_missing=[],
                    aggregate=agg, pipeline=pres, skew=skew, issues=issues, options=AnalysisOptions(),
                    llmdiag_version="0.1.0")


def summary(n: int = 8, **kw) -> dict:
    """The JSON summary of `analysis(...)`, findings left empty (tests run the rules themselves)."""
    return analysis(n, **kw).to_dict()


def typed(s: dict) -> Analysis:
    """A summary dict a test has edited, read back as every consumer reads one."""
    return Analysis.from_dict(s, "test summary")


def busy(n: int = 8, **kw) -> dict:
    """A summary on which several rules fire at once (for screenshots and the report's findings section)."""
    s = summary(n, pipeline=True, **kw)
    p = s["pipeline"]
    for b in p["stage_bubbles"]:
        b["measured"] = 0.30 + 0.02 * b["stage"]
        b["gap"] = b["measured"] - b["theory"]
    p["measured"] = sum(b["measured"] for b in p["stage_bubbles"]) / len(p["stage_bubbles"])
    p["explanation"] = (f"Measured bubble {p['measured']:.1%} against {p['theory']:.1%} from the 1f1b formula and "
                        f"{p['replay']:.1%} in a replay with free communication: point-to-point waits dominate.")
    for r in s["ranks"]:
        for c in r["comm_by_kind"]:
            c["overlapped_ms"] = 0.3 * c["total_ms"]
            c["overlap_ratio"] = 0.3
        r["exposed_comm_ms"] = 9.8
        r["exposed_comm_frac"] = 9.8 / r["step_time_ms"]
    s["ranks"][3]["hints"]["dataloader_frac"] = 0.22
    s["ranks"][-1]["memory"][0]["peak_reserved"] = int(0.96 * 80 * GIB)
    s["skew"]["stragglers"] = [{"rank": 5, "reason": "arrives last at collectives", "value": 0.875}]
    return s


def stretch(step: int, op: str, idle_ms: float, stack: list[str]) -> dict:
    """One long host op's stretch of device idle, as `ranks[].idle.stretches[]` lists it (cause: host)."""
    return {"step": step, "idle_ms": idle_ms, "op": op, "op_ms": idle_ms, "cause": "host", "stack": stack}


def host_idle(n: int, idle_frac: float, host_bound_ms: float, stretches: list[dict] | None = None) -> dict:
    """`n` ranks of ~100 ms steps and 2000 kernels per step, each with `idle_frac` of its step idle, `host_bound_ms` of
    it waiting on the host, the rest queued, and the long-op `stretches` given."""
    s = summary(n)
    for r in s["ranks"]:
        r["hints"].update(device_idle_frac=idle_frac, short_kernel_frac=0.1, median_kernel_us=30.0,
                          kernels_per_step=2000)
        idle = idle_frac * r["step_time_ms"]
        r["idle"] = {"idle_ms": idle, "host_bound_ms": host_bound_ms, "queued_ms": idle - host_bound_ms,
                     "stretches": list(stretches or [])}
    return s
