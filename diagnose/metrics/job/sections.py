"""The Analysis of one job, built once from its frozen Job (state.py): each section a function of the Job alone.

Resolution (resolve.py) has decided the ranks, clocks and matches; here nothing is decided again and nothing
the Job holds is written (the skew's compute-excess stragglers go on a copy of the resolved skew). What a
later stage adds is passed in: the what-if (diagnose.simulate, above metrics), the runs the input holds and
the issues said about the input as a whole (analyze.py); the measured pipeline completed by the replay
(simulate/replay.py, on a copy). The rules then fill `findings`, and cap_steps cuts
per-step rows (model/step_cap.py) after the rules have read them: those two stay after the build. Building
twice from one Job gives equal Analyses (tests/unit/metrics/test_job_resolve.py).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import numpy as np

from llmdiag.diagnose.metrics.job.accum import accum_summary
from llmdiag.diagnose.metrics.job.kernel_world import world_views
from llmdiag.diagnose.metrics.job.moe import moe_summary
from llmdiag.diagnose.metrics.job.state import Job
from llmdiag.diagnose.metrics.job.step_stats import step_section
from llmdiag.diagnose.metrics.job.stragglers import compute_stragglers
from llmdiag.diagnose.model.analysis import Aggregate, Analysis, AnalysisOptions, Issue, RankMetrics

if TYPE_CHECKING:
    from llmdiag.diagnose.model.analysis import JobCriticalPath, KernelViews
    from llmdiag.diagnose.model.manifest import Manifest
    from llmdiag.diagnose.model.pipeline import PipelineResult
    from llmdiag.diagnose.model.skew import SkewResult


def build_analysis(job: Job, *, name: str, opts: AnalysisOptions, version: str, pipeline: PipelineResult | None = None,
                   whatif=None, runs=(), first_issues: list[Issue] | tuple = (), last_issues: list[Issue] | tuple = (),
                   tracks: dict | None = None) -> Analysis:
    """The Analysis of `job`, constructed once. `pipeline`: the measured one as the replay completed it
    (simulate/replay.py), else the Job's as measured. `first_issues` / `last_issues` go before / after the
    Job's and the step summary's (the runs line first, a stale manifest last, as every output has listed
    them); `tracks`, when given, gets the job path's stretches (the timeline's job path track)."""
    pipeline = job.pipeline if pipeline is None else pipeline
    metrics = [o.metrics for o in job.ranks]
    source = os.path.abspath(job.source)
    agg = aggregate(metrics, job.manifest)
    moe = moe_section(job)
    path, note = job_path_section(job, tracks)
    steps, step_issues = step_section(metrics, source)
    return Analysis(
        source=source, name=name, trace_kind=trace_kind(metrics), world_size=job.world,
        layout=job.layout, manifest=job.manifest, ranks=metrics, ranks_missing=job.missing,
        aggregate=agg, pipeline=pipeline, skew=skew_section(job, metrics, agg, moe),
        issues=[*first_issues, *job.issues, *step_issues, *last_issues],
        options=dataclasses.replace(opts, bytes=sum(o.bytes_read for o in job.in_order)),
        llmdiag_version=version, ranks_duplicate=job.duplicates,
        critical_path=path, critical_path_note=note, moe=moe, accum=accum_section(job, metrics),
        whatif=whatif, steps=steps, runs=list(runs), kernel_views=kernel_views_section(job),
    )


def moe_section(job: Job):
    """Expert parallelism over the ranks (moe.py); None without all-to-all or MoE labels."""
    return moe_summary({o.rank: o.moe for o in job.in_order if o.moe}, job.hosts)


def accum_section(job: Job, metrics: list[RankMetrics]):
    """Gradient accumulation microsteps (accum.py), with the layout as resolved (an inferred pp included)."""
    return accum_summary({o.rank: o.forwards for o in job.in_order}, metrics, job.manifest, job.layout,
                         {o.rank: o.regather_ms for o in job.in_order})


def kernel_views_section(job: Job) -> KernelViews | None:
    """Op -> kernel and roofline over the ranks (kernel_world.py)."""
    good = job.in_order
    return world_views([(o.metrics.rank, o.metrics.nsteps, o.metrics.device, o.op_kernels, o.roofline) for o in good],
                       [(o.metrics.rank, o.metrics.nsteps, o.stream_idle) for o in good],
                       [o.kernel_sequences for o in good if o.kernel_sequences])


def job_path_section(job: Job, tracks: dict | None = None) -> tuple[JobCriticalPath | None, str]:
    """The job's critical path through its matched collectives (critical_path.py) and the note that says why
    it is not stated (some rank event-sampled); (None, "") with one rank."""
    if len(job.in_order) < 2:
        return None, ""
    from llmdiag.diagnose.metrics.job.critical_path import job_critical_path, sampled_job_note, segment_tracks

    segs: list | None = [] if tracks is not None else None  # the path's stretches: the timeline's job path track
    path = job_critical_path(job.in_order, job.shift_ns, job.collectives, segs)
    note = sampled_job_note(job.in_order)
    if tracks is not None and segs:
        segment_tracks(segs, tracks, job.shift_ns)
    return path, note


def skew_section(job: Job, metrics: list[RankMetrics], agg: Aggregate, moe) -> SkewResult | None:
    """The resolved skew with the compute-excess stragglers beside the arrival ones, decided once
    (stragglers.py) now that the stages and the MoE expert compute they discount are known: a copy, the Job's
    skew is left as resolved. A skew of its own where only compute stragglers are found."""
    sk = job.skew
    late = [x for x in (sk.stragglers if sk else []) if x.kind]
    comp = compute_stragglers(metrics, job.pipeline, job.manifest, job.layout, moe, agg.step_time_ms or None,
                              {x.rank for x in late})
    if sk is not None:
        return dataclasses.replace(sk, decided=True, stragglers=late + comp)
    if not comp:
        return None
    from llmdiag.diagnose.model.skew import SkewResult  # (imported where there is a skew to hold)

    return SkewResult(matched=0, by_collective=[], last_arrivals={}, host_shift_ms={}, stragglers=comp, decided=True)


def aggregate(ms: list[RankMetrics], man: Manifest | None) -> Aggregate:
    """The job's headline numbers over its ranks (shared with the op tables: simulate/op_table.py)."""
    ov = [(m.overlap_ratio, m.rank) for m in ms if m.overlap_ratio is not None]
    peaks = [(m.memory_peak, -m.rank) for m in ms if m.memory_peak is not None]  # a tie names the lowest rank
    step = float(np.mean([m.step_time_ms for m in ms]))
    tokens = man.tokens_per_step if man else None
    flops = man.model_flops_per_step if man else None
    peak = man.device.peak_flops if man and man.device else None
    world = (man.world_size if man else None) or len(ms)
    tps = tokens / (step / 1e3) if tokens and step > 0 else None
    achieved = flops / (step / 1e3) / world if flops and step > 0 else None
    return Aggregate(
        ranks=len(ms), step_time_ms=step, step_time_max_ms=max(m.step_time_ms for m in ms),
        overlap_ratio_min=min(v for v, _ in ov) if ov else None,
        overlap_ratio_mean=float(np.mean([v for v, _ in ov])) if ov else None,
        overlap_worst_rank=min(ov)[1] if ov else None,
        exposed_comm_frac_mean=float(np.mean([m.exposed_comm_frac for m in ms])),
        exposed_comm_frac_max=max(m.exposed_comm_frac for m in ms),
        idle_frac_mean=float(np.mean([m.idle_frac for m in ms])),
        compute_frac_mean=float(np.mean([m.compute_ms / m.step_time_ms if m.step_time_ms else 0 for m in ms])),
        memory_peak_max=max(peaks)[0] if peaks else None, memory_peak_rank=-max(peaks)[1] if peaks else None,
        tokens_per_s=tps, mfu=(achieved / peak) if achieved and peak else None,
        achieved_tflops_per_device=achieved / 1e12 if achieved else None,
    )


def trace_kind(ms: list[RankMetrics]) -> str:
    kinds = {m.trace_kind for m in ms}
    return kinds.pop() if len(kinds) == 1 else "mixed"
