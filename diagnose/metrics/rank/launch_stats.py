"""Kernel launch statistics and queue length (HTA's cuda_kernel_launch_stats and queue_length_summary).

Two launch delays, each under its own name (docs/metrics.md, "Op → kernel, roofline, launches"):
- start-to-start (`delay_*`, llmdiag's): a device event's start minus its launch call's START (diagnose.metrics.
  launches), over the device events (kernels, memcpys, memsets) starting inside the windows, unclipped (a
  negative value is a host/device clock offset, kept visible); median, p90 and max;
- HTA's (`hta_delay_*`, HTA 0.5 cuda_kernel_launch_stats): the device event's start minus its launch call's
  END, clipped at 0, over the whole trace, for the calls HTA reads (HTA_LAUNCH_CALLS: kernel launches and the
  async memcpy/memset, HTA's default include_memory_events=True), on HTA's whole-µs times (it rounds ns
  timestamps: start up, end down), so its median is HTA's. Launch overhead: CPU time spent inside those
launch calls, per step. Queue length of a stream: device events launched on it and not yet started (HTA's
definition: +1 at each launch call, −1 when the event starts executing), sampled just after each launch and
each start, the moments HTA's time series changes; per stream its max and mean over the samples, the
QUEUE_STREAMS streams with the longest queues kept. A queue near 1024 stalls the launching thread (HTA).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMM, COMPUTE, RankTrace
from llmdiag.diagnose.metrics.rank.launches import device_events, launch_calls
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.kernel_views import LaunchStats, QueueStat
from llmdiag.diagnose.metrics.rank.sets import distinct, median, percentile

QUEUE_STREAMS = 2
# the runtime calls HTA 0.5's cuda_kernel_launch_stats pairs with device events by correlation id
HTA_LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync",
                              "runFunction - job_prep_and_submit_for_execution"})


def launch_stats(t: RankTrace, wins: list[Window]) -> LaunchStats | None:
    """None for a trace without launched device events (CPU traces, traces without correlation ids)."""
    dev = device_events(t, wins)
    rt = launch_calls(t, dev) if len(dev) else np.zeros(0, np.int64)
    ok = rt >= 0
    hta = hta_launch_delays(t)
    if not ok.any() and not len(hta):
        return None
    dev, rt = dev[ok], rt[ok]
    delay = (t.ts[dev] - t.ts[rt]) / 1e3
    calls = distinct(rt)
    kcalls = distinct(rt[t.kind_mask(COMPUTE, COMM)[dev]])  # kernels' launches, not copies'
    n_steps = max(1, len(wins))
    # rounded to the trace's ns resolution: the summary holds one LaunchStats per rank, so digits count
    return LaunchStats(
        launches=len(calls), launches_per_step=round(len(calls) / n_steps, 3),
        delay_median_us=round(median(delay), 3) if len(delay) else None,
        delay_p90_us=round(percentile(delay, 90), 3) if len(delay) else None,
        delay_max_us=round(float(delay.max()), 3) if len(delay) else None,
        launch_ms_per_step=round(float(t.dur[calls].sum()) / 1e6 / n_steps, 6),
        queue=queue_lengths(t, dev, rt) if len(dev) else [],
        hta_delay_median_us=round(median(hta), 3) if len(hta) else None,
        hta_delay_p90_us=round(percentile(hta, 90), 3) if len(hta) else None,
        hta_delay_max_us=round(float(hta.max()), 3) if len(hta) else None, hta_events=len(hta),
        kernel_launch_ms_per_step=round(float(t.dur[kcalls].sum()) / 1e6 / n_steps, 6))


def _is_step(name: str) -> bool:
    return "ProfilerStep" in name


def hta_launch_delays(t: RankTrace) -> np.ndarray:
    """HTA's launch delay (µs) of every device event paired with a launch call of HTA_LAUNCH_CALLS by
    correlation id (HTA's inner join: every pair), over the trace as HTA's parse keeps it (no windows; with two
    or more ProfilerSteps, the calls before the last one's start: HTA drops the last step on load):
    max(0, start − call end) on whole µs, HTA's parse rounding (start up, end down; exact on µs traces)."""
    dev_mask = (t.stream >= 0) & (t.corr >= 0)
    calls = np.flatnonzero(t.name_mask(HTA_LAUNCH_CALLS.__contains__, (t.stream < 0) & (t.corr >= 0)))
    if len(t.name_ids(_is_step)) > 1:  # HTA's parse keeps host events before the last ProfilerStep's start only
        step = t.name_mask(_is_step, ~dev_mask)  # (and its device annotation, which HTA files with the host's)
        cut = -(int(t.ts[step].max()) // -1000)
        calls = calls[-(t.ts[calls] // -1000) < cut]
    dev = np.flatnonzero(dev_mask)
    if not len(calls) or not len(dev):
        return np.zeros(0)
    order = calls[np.argsort(t.corr[calls], kind="stable")]
    keys = t.corr[order]
    lo = np.searchsorted(keys, t.corr[dev], "left")
    n = np.searchsorted(keys, t.corr[dev], "right") - lo
    d = np.repeat(dev, n)  # a correlation id on several calls pairs each of them, as HTA's merge does
    c = order[np.repeat(lo, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))]
    # times are ns from a whole-µs origin (io/loader.py), so rounding them to µs rounds the trace's own
    start_us = -(t.ts[d] // -1000)  # ceil
    end_us = (t.ts[c] + t.dur[c]) // 1000  # floor
    return np.maximum(start_us - end_us, 0).astype(np.float64)


def queue_lengths(t: RankTrace, dev: np.ndarray, rt: np.ndarray) -> list[QueueStat]:
    """Per stream: launched-but-not-started device events just after each launch and each start."""
    out = []
    for s in distinct(t.stream[dev]).tolist():
        m = t.stream[dev] == s
        launch, start = t.ts[rt[m]], t.ts[dev[m]]
        launch = np.minimum(launch, start)  # a skewed clock never starts a kernel before its launch
        ls, ss = np.sort(launch), np.sort(start)
        samples = np.concatenate([launch, start])
        # launched at or before the sample, minus started at or before it
        q = np.searchsorted(ls, samples, side="right") - np.searchsorted(ss, samples, side="right")
        q = np.maximum(q, 0)
        out.append(QueueStat(stream=int(s), max=int(q.max()), mean=round(float(q.mean()), 3), samples=len(q)))
    out.sort(key=lambda x: (-x.max, -x.mean, x.stream))
    return out[:QUEUE_STREAMS]
