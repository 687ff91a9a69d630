"""Queue length over time per device stream, and time blocked on a full queue (HTA's
get_queue_length_time_series and get_time_spent_blocked_on_full_queue).

HTA's definition, kept as it is so the two can be compared: a stream's queue grows by one at the start of each
launch call HTA counts (cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync
and their HIP twins) whose device event is in the trace, and shrinks by one when that device event starts: the
work launched and not yet started, over the whole trace (not only the analysed steps). Where the device clock
runs ahead of the host's it can dip below 0, as HTA's does. The series has one point per distinct time at which
it changes, holding its value after every change at that time (HTA sorts equal times in no fixed order; its last
row at a time is this value). CUDA lets 1024 launches wait per stream: at that length the launching thread
blocks in the launch call, so time at or over `max_queue` is time the host could not run ahead.

The per-step summary (launch_stats.queue_lengths: max and mean per stream, inside the steps) stays the summary's;
this is the full series, for a notebook (diagnose/export/views.py).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank.launches import launch_calls

# HTA's TraceSymbolTable.get_runtime_launch_events_query: the calls that enqueue work on a stream
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
    "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream",
    "runFunction - job_prep_and_submit_for_execution",
})
CUDA_MAX_LAUNCH_QUEUE = 1024  # HTA's CUDA_MAX_LAUNCH_QUEUE_PER_STREAM


@dataclass
class QueueSeries:
    """One stream's queue length as a step function: `length[i]` holds from `ts_ns[i]` until `ts_ns[i + 1]`."""

    stream: int
    ts_ns: np.ndarray  # int64, the trace's ns relative to its origin (RankTrace.ts)
    length: np.ndarray  # int64


@dataclass
class QueueBlocked:
    """Time one stream's queue stood at or over `max_queue` (the launching thread blocked)."""

    stream: int
    max_queue: int
    blocked_us: float
    blocked_frac: float  # of the trace's span (first event start to last event start, HTA's trace duration)


def queue_series(t: RankTrace) -> list[QueueSeries]:
    """Per device stream (ascending), for a classified trace; [] where no counted launch has its device event."""
    dev = np.flatnonzero(t.stream >= 0)
    rt = launch_calls(t, dev) if len(dev) else np.zeros(0, np.int64)
    if not len(rt):
        return []
    launch_name = np.array([n in LAUNCH_CALLS for n in t.names] or [False], bool)
    ok = rt >= 0
    ok[ok] = launch_name[t.name[rt[ok]]]
    dev, rt = dev[ok], rt[ok]
    out = []
    for s in np.unique(t.stream[dev]).tolist():
        m = t.stream[dev] == s
        times = np.concatenate([t.ts[rt[m]], t.ts[dev[m]]])
        delta = np.concatenate([np.ones(int(m.sum()), np.int64), -np.ones(int(m.sum()), np.int64)])
        o = np.argsort(times, kind="stable")
        times, length = times[o], np.cumsum(delta[o])
        last = np.flatnonzero(np.append(times[1:] != times[:-1], True))  # the last change at each time
        out.append(QueueSeries(int(s), times[last].astype(np.int64), length[last].astype(np.int64)))
    return out


def blocked_on_full_queue(t: RankTrace, series: list[QueueSeries],
                          max_queue: int = CUDA_MAX_LAUNCH_QUEUE) -> list[QueueBlocked]:
    """Per stream: the time from each change that leaves the queue at >= max_queue to the next change (the last
    point has no next and counts nothing, as in HTA), and its share of the trace's span."""
    span = float(t.ts.max() - t.ts.min()) if len(t) else 0.0
    out = []
    for q in series:
        dur = np.diff(q.ts_ns).astype(np.float64)
        ns = float(dur[q.length[:-1] >= max_queue].sum())
        out.append(QueueBlocked(q.stream, max_queue, ns / 1e3, ns / span if span > 0 else 0.0))
    return out
