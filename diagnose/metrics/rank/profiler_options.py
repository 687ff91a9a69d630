"""Which costly profiler options a trace was recorded with, from its own events.

`with_stack=True` records a `python_function` event for every Python call (tens of thousands per step in a
training loop), each costing host time the unprofiled job does not spend; `record_shapes=True` leaves
`Input Dims`/`Input type` on the ops; `profile_memory=True` leaves `[memory]` instants. Counts are per step, over
the steps' host spans (ProfilerStep), so they compare with the host times the other metrics report.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.analysis import Hints

PY_CATS = ("python_function",)


def _host(wins: list[Window]) -> list[Window]:
    return [Window(w.step, w.host_start, w.host_end, w.host_start, w.host_end) for w in wins]


def profiler_facts(t: RankTrace, wins: list[Window], h: Hints) -> None:
    """Fills `h`'s profiler-option fields: python_function events, host ops and [memory] instants per step, and
    whether ops carry shapes (None where no op could show it: no GEMM or collective op in the trace)."""
    host = _host(wins)
    n = max(1, len(wins))
    h.python_events_per_step = float(in_windows(t, t.cat_mask(*PY_CATS), host).sum()) / n
    h.host_ops_per_step = float(in_windows(t, t.kind == CPU_OP, host).sum()) / n if t.kind is not None else None
    m = t.memory.ts
    if len(m) and host:
        starts = np.array([w.start for w in host], np.int64)
        ends = np.array([w.end for w in host], np.int64)
        k = np.searchsorted(starts, m, side="right") - 1
        inside = (k >= 0) & (m < ends[np.maximum(k, 0)])
        h.memory_events_per_step = float(inside.sum()) / n
    else:
        h.memory_events_per_step = 0.0
    shaped = any("Input Dims" in a or "Input type" in a for a in t.comm_args.values())
    h.shapes_recorded = True if shaped else None
