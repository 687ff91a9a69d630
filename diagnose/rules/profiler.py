"""Profiler caveat: a trace recorded with `with_stack=True` inflates host times (every Python call is an event)."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx

# Host time one `python_function` event adds: 0.42 µs measured on this project's build machine (AMD EPYC, torch
# CPU profiler, 100k calls, best of 3, with vs without with_stack), rounded up.
PY_EVENT_US = 0.5
MIN_EVENTS = 100  # python_function events per step: fewer are stray (a trace with_stack records one per call)


def profiler_overhead(c: Ctx) -> list[Finding]:
    """A low-severity caveat, no gain, wherever a step holds MIN_EVENTS python_function events: host times (and
    host-bound gaps) include ≈ events × PY_EVENT_US per step that the unprofiled job does not spend."""
    rows = []
    for r in c.ranks:
        n = r.hints.python_events_per_step or 0
        cost_ms = n * PY_EVENT_US / 1e3
        if n >= MIN_EVENTS and r.step_time_ms > 0:
            rows.append((r, n, cost_ms))
    if not rows:
        return []
    r, n, cost = max(rows, key=lambda x: x[2] / x[0].step_time_ms)
    also = [w for w, on in (("record_shapes (ops carry Input Dims / Input type)", r.hints.shapes_recorded),
                            ("profile_memory ([memory] events)", (r.hints.memory_events_per_step or 0) > 0)) if on]
    ev = (f"rank {r.rank}: {fmt(n, 'int')} `python_function` events per step (the trace was recorded with_stack=True): "
          f"≈ {fmt(cost, 'ms')} of host time per step ({fmt(cost / r.step_time_ms, 'pct')} of its "
          f"{fmt(r.step_time_ms, 'ms')} step) at an assumed {PY_EVENT_US:g} µs per event"
          + (f"; also recorded: {', '.join(also)}" if also else "") + f" ({plural(len(rows), 'rank')})")
    act = ("read host times, host-bound idle and launch gaps as inflated by that much; for timing, profile again "
           "without `with_stack=True` (and without `record_shapes`/`profile_memory` unless needed)")
    return [c.finding("profiler_overhead", "low", "Host times inflated by the profiler's Python stacks", ev,
                      [x[0].rank for x in rows], [], act, "none: informational (the numbers' precision)", None,
                      "ranks[].hints.python_events_per_step", events=["python_function events"])]
