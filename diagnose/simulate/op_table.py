"""An Analysis of one op table of the straggler study's artifact (`llmdiag analyze trace-<job>.parquet`):
each worker's steps broken down like a Kineto rank's (compute and communication as unions of its ops), its
op types as the "kernels" table, and the what-if section (diagnose.simulate.artifact).

Compute ops: forward/backward compute, optimizer, gc; communication: p2p send/recv (a blocking recv
includes its wait), DP collectives, the layernorm/embedding all-reduces and the grad-norm clip.
"""

from __future__ import annotations

import os

import numpy as np

from llmdiag.diagnose.io.megatron_ops import OpTable, read_op_table
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.job.sections import aggregate  # the one aggregate over ranks, shared with Kineto
from llmdiag.diagnose.model.analysis import Analysis, AnalysisOptions, Hints, Issue, KernelStat, RankMetrics, StepBreakdown
from llmdiag.diagnose.model.manifest import DIMS
from llmdiag.diagnose.simulate.artifact import whatif_of_table
from llmdiag.diagnose.simulate.megatron import COMM_TYPES

NS = 1e9  # the artifact's seconds as int64 ns, for the interval algebra


def analyse_op_table(path: str, version: str = "") -> Analysis:
    t = read_op_table(path)
    names = np.asarray(t.optypes, dtype=object)[t.optype]
    ranks = _ranks(t, names)
    world = int(t.meta.get("world_size") or len(ranks))
    missing = sorted(set(range(world)) - {r.rank for r in ranks})
    issues = []
    if missing:
        issues.append(Issue(path, f"{len(missing)} of {world} workers have no ops in the table", None, "warning"))
    layout = {d: 1 for d in DIMS} | {"dp": int(t.meta["dp_size"]), "pp": int(t.meta["pp_size"]),
                                      "tp": int(t.meta.get("tp_size") or 1)}
    base = os.path.basename(path).removesuffix(".parquet")
    w = whatif_of_table(t)
    if w.missing:
        issues.append(Issue(path, "what-if not simulated: " + "; ".join(w.missing), None, "warning"))
    return Analysis(source=os.path.abspath(path), name=str(t.meta.get("trial_name") or base), trace_kind="gpu",
                    world_size=world, layout=layout, manifest=None, ranks=ranks, ranks_missing=missing,
                    aggregate=aggregate(ranks, None), pipeline=None, skew=None, issues=issues,
                    options=AnalysisOptions(files=1, bytes=os.path.getsize(path)), llmdiag_version=version,
                    whatif=w)


def _ranks(t: OpTable, names) -> list[RankMetrics]:
    s_ns = np.round(t.start * NS).astype(np.int64)
    e_ns = np.round((t.start + t.duration) * NS).astype(np.int64)
    origin = int(s_ns.min())
    comm = np.isin(names, list(COMM_TYPES))
    steps = np.unique(t.step)
    first = {k: int(s_ns[t.step == k].min()) for k in steps}
    last = {k: int(e_ns[t.step == k].max()) for k in steps}
    out = []
    for r in np.unique(t.rank):
        mine = t.rank == r
        rows = []
        for k in steps:
            m = mine & (t.step == k)
            cu, mu = iv.union(s_ns[m & ~comm], e_ns[m & ~comm]), iv.union(s_ns[m & comm], e_ns[m & comm])
            time, c, x = last[k] - first[k], iv.total(cu), iv.total(mu)
            ov = iv.intersect_total(cu, mu)
            busy = iv.total(iv.union_of(cu, mu))
            rows.append(StepBreakdown(int(k), (first[k] - origin) / 1e6, time / 1e6, c / 1e6, x / 1e6, ov / 1e6,
                                      (x - ov) / 1e6, (c - ov) / 1e6, 0.0, (time - busy) / 1e6, ov / x if x else None))
        mean = lambda f: float(np.mean([getattr(s, f) for s in rows]))
        step = mean("time_ms")
        comm_sum = sum(s.comm_ms for s in rows)
        out.append(RankMetrics(
            rank=int(r), file=t.path, host="", trace_kind="gpu", steps=rows, step_time_ms=step,
            compute_ms=mean("compute_ms"), comm_ms=mean("comm_ms"), overlapped_comm_ms=mean("overlapped_comm_ms"),
            exposed_comm_ms=mean("exposed_comm_ms"), compute_only_ms=mean("compute_only_ms"), other_ms=0.0,
            idle_ms=mean("idle_ms"),
            overlap_ratio=sum(s.overlapped_comm_ms for s in rows) / comm_sum if comm_sum else None,
            exposed_comm_frac=mean("exposed_comm_ms") / step if step else 0.0,
            idle_frac=mean("idle_ms") / step if step else 0.0, comm_by_kind=[],
            top_kernels=_op_types(t, names, mine, comm, len(steps)), memory=[],
            hints=Hints(kernels_per_step=float(mine.sum()) / len(steps), median_kernel_us=None, short_kernel_frac=None,
                        device_idle_frac=None, dataloader_frac=None, fp32_gemm_frac=None, compute_capability=None),
            coords={"dp": int(t.dp_rank[mine][0]), "pp": int(t.stage[mine][0])}, origin_us=origin / 1e3,
            kernel_time_ms=float(t.duration[mine].sum() * 1e3)))
    return out


def _op_types(t: OpTable, names, mine, comm, n_steps: int) -> list[KernelStat]:
    total = float(t.duration[mine].sum()) or 1.0
    out = []
    for name in np.unique(names[mine]):
        m = mine & (names == name)
        d = t.duration[m]
        out.append(KernelStat(str(name), "comm" if comm[m][0] else "compute", int(m.sum()), float(d.sum() * 1e3),
                              float(d.mean() * 1e6), float(d.max() * 1e6), float(d.sum() / total)))
    return sorted(out, key=lambda k: -k.total_ms)
