"""`llmdiag.diagnose.export.events.events(path, rank=R)`: one rank's events as a DataFrame (HTA's `t.get_trace(rank)`).

Every complete event of the rank's trace, one row each, in start order, with what llmdiag derived for it: its
kind (compute, comm, memcpy, ..., as the metrics classify it), the step it starts in, and its op parent — for
a device event the innermost host op enclosing its launch call (diagnose.metrics.host_ops) and the launch
delay, for a host event the innermost host op enclosing it on its thread. A pandas DataFrame when pandas is
installed (and `pandas` is not False), else a pyarrow Table; neither is an llmdiag dependency
(`pip install 'llmdiag[tables]'`). One rank at a time: the table holds every event, so it is as large as the
trace (the summary's per-rank views are the bounded ones). `args=True` adds each event's whole `args` as JSON
text (export/event_args.py: the loader keeps only the args its metrics read, so they are read again).
"""

from __future__ import annotations

import os

import numpy as np

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.io.discover import discover, rank_from_name
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.io.trace import CPU_OP, KIND_NAMES, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.launches import launch_calls
from llmdiag.diagnose.metrics.rank.steps import windows

# (column, meaning), in table order (docs/python.md lists them)
EVENT_COLUMNS = (
    ("name", "event name as the trace writes it"), ("cat", "Kineto category (kernel, cpu_op, cuda_runtime, ...)"),
    ("kind", "llmdiag's class: compute, comm, memcpy, memset, sync, cpu_op, runtime, annotation, other"),
    ("ts_us", "start, µs on the trace's own clock"), ("dur_us", "duration, µs"),
    ("step", "ProfilerStep it starts in, -1 outside the analysed steps"),
    ("pid", "process (device for device events), as text"), ("tid", "thread (stream for device events), as text"),
    ("stream", "device stream, -1 for host events"), ("correlation", "launch ↔ device event id, -1 none"),
    ("external_id", "Kineto External id, -1 none"),
    ("op", "device event: innermost host op enclosing its launch; host event: innermost host op enclosing it; '' none"),
    ("launch_delay_us", "device event: its start − its launch call's start; NaN otherwise"),
)


ARGS_COLUMN = ("args", "args=True: the event's `args` object as JSON text ('{}' where it has none)")


def events(path: str, rank: int | None = None, *, pandas: bool | None = None, comm_regex: str | None = None,
           args: bool = False):
    """The events of rank `rank` of the traces at `path` (a trace file, or a folder: the file whose name says
    rank<R>, else the first whose distributedInfo does; or an Analysis, whose rank's file is read); a DataFrame,
    or a pyarrow Table with pandas=False.
    `args=True` adds each event's args as JSON text (the trace is read a second time for them)."""
    t = load(path, rank, comm_regex)
    cols = event_columns(t)
    spec = EVENT_COLUMNS
    if args:
        from llmdiag.diagnose.export.event_args import event_args

        cols["args"], spec = event_args(t), EVENT_COLUMNS + (ARGS_COLUMN,)
    return frame(cols, pandas, t.path, spec, "events")


def load(path, rank: int | None, comm_regex: str | None = None) -> RankTrace:
    """One rank's trace, classified (the views of diagnose/export/views.py start here). `path` may also be an
    Analysis (`llmdiag.analyze_path(...)`): its rank's trace file, classified with the Analysis' comm regex."""
    if hasattr(path, "ranks") and hasattr(path, "options"):
        files = {r.rank: r.file for r in path.ranks}
        if rank is None and len(files) == 1:
            rank = next(iter(files))
        if rank not in files:
            raise LlmdiagError(f"no rank {rank} in this analysis (ranks {sorted(files)})", path.source,
                               "pass rank=R")
        comm_regex = comm_regex if comm_regex is not None else path.options.comm_regex
        path = files[rank]
    t = _load(path, rank)
    classify(t, comm_regex)
    return t


def _load(path: str, rank: int | None) -> RankTrace:
    files = discover(path).files
    if rank is None:
        if len(files) > 1:
            raise LlmdiagError(f"{len(files)} trace files: say which rank", path, "events(path, rank=R)")
        return load_trace(files[0])
    named = [f for f in files if rank_from_name(f) == rank]
    for f in named + [f for f in files if f not in named and rank_from_name(f) is None]:
        t = load_trace(f)
        if t.rank == rank or (t.rank is None and f in named):
            return t
    raise LlmdiagError(f"no trace of rank {rank} among {len(files)} files", path, "check the rank, or give the file")


def event_columns(t: RankTrace) -> dict[str, object]:
    """The table as {column: numpy array or list}, rows in start order (classified trace)."""
    n = len(t)
    wins, _ = windows(t, False)
    step = np.full(n, -1, np.int64)
    if wins:
        starts = np.array([w.start for w in wins], np.int64)
        ends = np.array([w.end for w in wins], np.int64)
        k = np.searchsorted(starts, t.ts, side="right") - 1
        inside = (k >= 0) & (t.ts < ends[np.maximum(k, 0)])
        step[inside] = np.array([w.step for w in wins], np.int64)[k[inside]]
    op = np.full(n, -1, np.int64)
    host_parent(t, op)
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
    for d, o in (host_ops.launching_ops(t, ops, t.kind) if len(ops) else {}).items():
        op[d] = o
    dev = np.flatnonzero(t.stream >= 0)
    delay = np.full(n, np.nan)
    rt = launch_calls(t, dev) if len(dev) else np.zeros(0, np.int64)
    hit = rt >= 0
    delay[dev[hit]] = (t.ts[dev[hit]] - t.ts[rt[hit]]) / 1e3
    names, cats = np.array(t.names, object), np.array(t.cats, object)
    pid = np.array([str(p) for p, _ in t.threads], object)
    tid = np.array([str(x) for _, x in t.threads], object)
    op_name = np.where(op >= 0, names[t.name[np.maximum(op, 0)]] if n else names[:0], "")
    return {
        "name": names[t.name].tolist(), "cat": cats[t.cat].tolist(),
        "kind": np.array(KIND_NAMES, object)[t.kind].tolist(),
        "ts_us": t.ts / 1e3 + t.origin_us, "dur_us": t.dur / 1e3, "step": step,
        "pid": pid[t.thread].tolist(), "tid": tid[t.thread].tolist(),
        "stream": t.stream.astype(np.int64), "correlation": t.corr, "external_id": t.ext,
        "op": list(op_name), "launch_delay_us": delay,
    }


def host_parent(t: RankTrace, out: np.ndarray) -> None:
    """out[i] = the innermost host op (cpu_op) enclosing host event i on its thread, other than itself: one
    stack sweep per thread, events by start (the longer first at equal starts)."""
    host = np.flatnonzero(t.stream < 0)
    if not len(host):
        return
    order = host[np.lexsort((-t.dur[host], t.ts[host], t.thread[host]))]
    is_op = (t.kind[order] == CPU_OP).tolist()
    ts, end, th = t.ts[order].tolist(), (t.ts[order] + t.dur[order]).tolist(), t.thread[order].tolist()
    stack: list[tuple[int, int]] = []  # (end, index) of the open ops of the current thread
    cur = None
    for j, i in enumerate(order.tolist()):
        if th[j] != cur:
            stack, cur = [], th[j]
        while stack and stack[-1][0] <= ts[j]:
            stack.pop()
        if stack:
            out[i] = stack[-1][1]
        if is_op[j]:
            stack.append((end[j], i))


def frame(cols: dict, want_pandas: bool | None, path: str, spec=EVENT_COLUMNS, table: str = "events"):
    """`cols` ({column: values}) in `spec`'s order as a pandas DataFrame, else (or with want_pandas=False) a
    pyarrow Table."""
    if want_pandas is not False:
        try:
            import pandas as pd
        except ImportError:
            if want_pandas:
                raise LlmdiagError(f"{table}(pandas=True) needs pandas, which is not installed",
                                   hint="pip install pandas") from None
        else:
            return pd.DataFrame({c: cols[c] for c, _ in spec})
    try:
        import pyarrow as pa
    except ImportError:
        raise LlmdiagError(f"{table}() needs pandas or pyarrow, neither is installed",
                           hint="pip install 'llmdiag[tables]'") from None
    return pa.table({c: cols[c] for c, _ in spec},
                    metadata={"llmdiag.table": table, "llmdiag.source": os.path.basename(path)})
