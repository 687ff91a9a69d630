"""The op → kernel, roofline and launch views as rows over ranks: what the terminal and the report print.

Per-rank numbers are computed once in the worker (diagnose.model.kernel_views); here ranks are only summed:
op → kernel rows by op name (counts and times per step, the launch delay weighted by the events that have
one), roofline rows by (op, shape, dtype) (achieved TFLOP/s and GB/s of the summed FLOPs, bytes and kernel
time: a rank's own row where one rank has it), launch statistics one row per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.model.analysis import Analysis

OP_HEADER = ["op", "ranks", "kernels/step", "ms/step", "mean µs", "launch delay µs", "top kernel"]
OP_NOTE = ("Device events by the innermost host op enclosing their launch call, summed over the ranks (each rank's "
           "top 5 ops by device time; the rest are '(other ops)'). Launch delay: kernel start − launch call start, "
           "the mean (queueing plus launch latency).")
ROOF_HEADER = ["op", "shape", "dtype", "calls", "kernel ms", "TFLOP/s", "GB/s", "FLOP/B", "of peak", "bound"]
ROOF_NOTE = ("GEMM and attention ops whose Input Dims the trace records: FLOPs from the shapes (GEMM 2·M·N·K, attention "
             "4·B·H·S²·D, ×2.5 backward, causal masks counted in full), bytes = inputs + output once (a lower bound). "
             "Bound: compute when FLOP/B exceeds the device's ridge point (datasheet peak FLOP/s ÷ HBM bytes/s), "
             "else memory; blank where the device or precision has no listed peak.")
LAUNCH_HEADER = ["rank", "launches/step", "delay p50 µs", "delay p90 µs", "launch ms/step", "short kernels", "queue max"]
LAUNCH_NOTE = ("Launch delay: device event start − its launch call's start. Short kernels: under 10 µs. Queue: device "
               "events launched on a stream and not yet started (HTA's queue length); near 1024 the launching thread "
               "stalls.")


@dataclass
class OpRow:
    op: str
    ranks: int
    kernels_per_step: float
    ms_per_step: float
    mean_us: float
    launch_delay_us: float | None
    top_kernel: str


@dataclass
class RoofRow:
    op: str
    shape: str
    dtype: str
    calls: int
    kernel_ms: float
    tflops: float | None
    gbps: float | None
    intensity: float | None
    peak_frac: float | None
    bound: str


def op_rows(a: Analysis, limit: int) -> tuple[list[OpRow], int]:
    """(op rows over ranks, most device time per step first, at most `limit`; how many ops there are)."""
    acc: dict[str, list] = {}  # op -> [ranks, count/step, ms/step, delay·n, n with delay, {kernel: ms}]
    for r in a.ranks:
        n = r.nsteps
        for o in r.op_kernels:
            x = acc.setdefault(o.op, [0, 0.0, 0.0, 0.0, 0, {}])
            x[0] += 1
            x[1] += o.count / n
            x[2] += o.total_ms / n
            if o.launch_delay_us is not None:
                x[3] += o.launch_delay_us * o.count
                x[4] += o.count
            for k in o.kernels[:1]:
                x[5][k] = x[5].get(k, 0.0) + o.total_ms
    rows = [OpRow(op, x[0], x[1], x[2], x[2] * 1e3 / x[1] if x[1] else 0.0, x[3] / x[4] if x[4] else None,
                  max(x[5], key=lambda k: (x[5][k], k)) if x[5] else "") for op, x in acc.items()]
    rows.sort(key=lambda x: (-x.ms_per_step, x.op))
    return rows[:limit], len(rows)


def roof_rows(a: Analysis, limit: int) -> tuple[list[RoofRow], int]:
    """(roofline rows over ranks, most kernel time first, at most `limit`; how many there are)."""
    acc: dict[tuple, list] = {}  # (op, shape, dtype) -> [calls, ms, gflop, gbytes, {peak}, {bound}, row]
    for r in a.ranks:
        for x in r.roofline:
            g = acc.setdefault((x.op, x.shape, x.dtype), [0, 0.0, 0.0, 0.0, set(), set(), x])
            g[0] += x.count
            g[1] += x.kernel_ms
            g[2] += x.gflop
            g[3] += x.gbytes
            g[4].add(x.peak_tflops)
            g[5].add(x.bound)
    rows = []
    for (op, shape, dtype), (calls, ms, gflop, gb, peaks, bounds, one) in acc.items():
        tflops = gflop / ms if ms else None  # GFLOP per ms is TFLOP/s
        peak = next(iter(peaks)) if len(peaks) == 1 else None
        rows.append(RoofRow(op, shape, dtype, calls, ms, tflops, gb / ms * 1e3 if ms else None,
                            gflop / gb if gb else None, tflops / peak if peak and tflops is not None else None,
                            next(iter(bounds)) if len(bounds) == 1 else "mixed"))
    rows.sort(key=lambda x: (-x.kernel_ms, x.op, x.shape))
    return rows[:limit], len(rows)


def launch_rows(a: Analysis, limit: int) -> tuple[list, int]:
    """(ranks with launch statistics, longest launch queue first then largest p90 delay, at most `limit`;
    how many have them): (index in a.ranks, RankMetrics)."""
    rows = [(i, r) for i, r in enumerate(a.ranks) if r.launch is not None]
    rows.sort(key=lambda x: (-x[1].launch.queue_max, -(x[1].launch.delay_p90_us or 0.0), x[1].rank))
    return rows[:limit], len(rows)
