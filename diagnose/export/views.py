"""One rank's HTA and TraceLens views as DataFrames, beside `events()` (diagnose/export/events.py):

- `queue_length(path, rank)`: HTA's get_queue_length_time_series, the launch queue of each stream over time;
- `queue_blocked(path, rank, max_queue=1024)`: HTA's get_time_spent_blocked_on_full_queue, per stream;
- `annotations(path, rank, gpu=True)`: HTA's get_gpu_user_annotation_breakdown (gpu=False: the host-side
  user_annotation spans), with the device time inside the spans;
- `modules(path, rank)`: TraceLens's nn.Module view, for a trace recorded with `with_modules=True`.

Each reads one rank's trace (a file, or a folder and `rank=R`, as events() does) and returns a pandas DataFrame
where pandas is installed, else (or with pandas=False) a pyarrow Table. The numbers come from
diagnose/metrics/rank/{queue_length,annotations,modules}.py; docs/python.md lists the columns.
"""

# No `from __future__ import annotations`: that name is this module's `annotations()` (Python 3.10+ reads
# the hints below as they are).
import numpy as np

from llmdiag.diagnose.export.events import frame, load
from llmdiag.diagnose.metrics.rank.annotations import annotation_breakdown
from llmdiag.diagnose.metrics.rank.modules import module_breakdown
from llmdiag.diagnose.metrics.rank.queue_length import CUDA_MAX_LAUNCH_QUEUE, blocked_on_full_queue, queue_series

QUEUE_COLUMNS = (
    ("ts_us", "time of the change, µs on the trace's own clock"), ("pid", "device process, as text"),
    ("tid", "stream thread, as text"), ("stream", "device stream"),
    ("queue_length", "launched, not yet started device events on the stream from this time to the next row"),
)
BLOCKED_COLUMNS = (
    ("stream", "device stream"), ("max_queue", "the length counted as full (CUDA: 1024 launches per stream)"),
    ("blocked_us", "time the stream's queue stood at or over max_queue"),
    ("blocked_frac", "blocked_us / the trace's span (first to last event start)"),
)
ANNOTATION_COLUMNS = (
    ("name", "annotation (record_function) name"), ("spans", "spans of that name"),
    ("sum_us", "their durations summed"), ("mean_us", "mean duration"), ("min_us", "shortest"), ("max_us", "longest"),
    ("std_us", "sample standard deviation (0 for one span, as HTA)"),
    ("device_us", "gpu=True: device events on the spans' streams inside them, clipped to them; NaN for gpu=False"),
)
MODULE_COLUMNS = (
    ("module", "module instance, `<Class>_<k>` as the trace names it"), ("type", "its class"),
    ("depth", "module spans enclosing its first call (0: a root module)"), ("calls", "its spans"),
    ("host_us", "their durations summed (host time, children included)"),
    ("device_events", "device events launched inside its calls"), ("device_us", "their durations summed"),
)


def _streams(t) -> dict[int, tuple[str, str]]:
    """stream -> (pid, tid) as text, from the stream's first device event."""
    out: dict[int, tuple[str, str]] = {}
    for i in np.flatnonzero(t.stream >= 0).tolist():
        s = int(t.stream[i])
        if s not in out:
            p, x = t.threads[t.thread[i]]
            out[s] = (str(p), str(x))
    return out


def queue_length(path: str, rank: int | None = None, *, pandas: bool | None = None):
    """Every change of each stream's launch queue, by stream then time (HTA: one row per launch and start)."""
    t = load(path, rank)
    series = queue_series(t)
    where = _streams(t)
    cols: dict[str, list] = {c: [] for c, _ in QUEUE_COLUMNS}
    for q in series:
        n = len(q.ts_ns)
        cols["ts_us"] += (q.ts_ns / 1e3 + t.origin_us).tolist()
        cols["pid"] += [where[q.stream][0]] * n
        cols["tid"] += [where[q.stream][1]] * n
        cols["stream"] += [q.stream] * n
        cols["queue_length"] += q.length.tolist()
    return frame(cols, pandas, t.path, QUEUE_COLUMNS, "queue_length")


def queue_blocked(path: str, rank: int | None = None, *, max_queue: int = CUDA_MAX_LAUNCH_QUEUE,
                  pandas: bool | None = None):
    """Per stream: time its launch queue was full (at or over `max_queue`)."""
    t = load(path, rank)
    rows = blocked_on_full_queue(t, queue_series(t), max_queue)
    cols = {c: [getattr(r, c) for r in rows] for c, _ in BLOCKED_COLUMNS}
    return frame(cols, pandas, t.path, BLOCKED_COLUMNS, "queue_blocked")


def annotations(path: str, rank: int | None = None, *, gpu: bool = True, pandas: bool | None = None):
    """Per annotation name: its spans' durations and (gpu=True) the device time inside them."""
    t = load(path, rank)
    rows = annotation_breakdown(t, gpu)
    cols = {c: [getattr(r, c) for r in rows] for c, _ in ANNOTATION_COLUMNS}
    return frame(cols, pandas, t.path, ANNOTATION_COLUMNS, "annotations")


def modules(path: str, rank: int | None = None, *, pandas: bool | None = None):
    """Per nn.Module instance: calls, host time, device events launched inside and their time (empty without
    `with_modules` spans)."""
    t = load(path, rank)
    rows = module_breakdown(t)
    cols = {c: [getattr(r, c) for r in rows] for c, _ in MODULE_COLUMNS}
    return frame(cols, pandas, t.path, MODULE_COLUMNS, "modules")
