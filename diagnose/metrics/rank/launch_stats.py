"""Kernel launch statistics and queue length (HTA's cuda_kernel_launch_stats and queue_length_summary).

Launch delay: a device event's start minus its launch call's start (diagnose.metrics.launches), over the
device events launched inside the windows; median, p90 and max. Launch overhead: CPU time spent inside those
launch calls, per step. Queue length of a stream: device events launched on it and not yet started (HTA's
definition: +1 at each launch call, −1 when the event starts executing), sampled just after each launch and
each start, the moments HTA's time series changes; per stream its max and mean over the samples, the
QUEUE_STREAMS streams with the longest queues kept. A queue near 1024 stalls the launching thread (HTA).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank.launches import device_events, launch_calls
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.kernel_views import LaunchStats, QueueStat
from llmdiag.diagnose.metrics.rank.sets import distinct, median, percentile

QUEUE_STREAMS = 2


def launch_stats(t: RankTrace, wins: list[Window]) -> LaunchStats | None:
    """None for a trace without launched device events (CPU traces, traces without correlation ids)."""
    dev = device_events(t, wins)
    rt = launch_calls(t, dev) if len(dev) else np.zeros(0, np.int64)
    ok = rt >= 0
    if not ok.any():
        return None
    dev, rt = dev[ok], rt[ok]
    delay = (t.ts[dev] - t.ts[rt]) / 1e3
    calls = distinct(rt)
    n_steps = max(1, len(wins))
    # rounded to the trace's ns resolution: the summary holds one LaunchStats per rank, so digits count
    return LaunchStats(
        launches=len(calls), launches_per_step=round(len(calls) / n_steps, 3),
        delay_median_us=round(median(delay), 3), delay_p90_us=round(percentile(delay, 90), 3),
        delay_max_us=round(float(delay.max()), 3), launch_ms_per_step=round(float(t.dur[calls].sum()) / 1e6 / n_steps, 6),
        queue=queue_lengths(t, dev, rt))


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
