"""The intervals the metrics measure in one rank's trace, as tracks for the annotated timeline (`analyze --timeline`).

Computed in the analysis itself, never by a second pass: `step_tracks` in each rank's job (per_rank.py) from
the trace it is analysing (bubbles and waits: job/track_intervals.py). All on the rank's own clock (int ns);
the exporter adds the rank's `clock_shift_ns`. So the exposed-communication intervals of a step sum to the
step's `exposed_comm_ms`, its idle intervals to `idle_ms`. On a GPU trace the idle intervals are those of the
idle attribution (`idle.idle_intervals`), one per cause (and op, for blocking runtime calls): per cause they
sum to the rank's `IdleBreakdown`, and together they are window − busy."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.idle import idle_intervals
from llmdiag.diagnose.metrics.rank.overlap import timeline
from llmdiag.diagnose.metrics.rank.steps import Window


@dataclass
class RankTracks:
    """Intervals (start ns, end ns, step) on the rank's own clock, by track name."""

    exposed: list[tuple[int, int, int]] = field(default_factory=list)
    idle: list[tuple] = field(default_factory=list)  # (start, end, step, cause, op) on GPU, (start, end, step) on CPU
    bubble: list[tuple[int, int, int]] = field(default_factory=list)
    waits: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, "kind pg")
    critical: list[tuple] = field(default_factory=list)  # (start, end, step, cause, "") the critical path (GPU)
    job_path: list[tuple] = field(default_factory=list)  # (start, end, step, category, rank the path left for or -1):
    # the job's critical path on this rank (metrics/job/critical_path.py)


def step_pairs(u: iv.Union, step: int) -> list[tuple[int, int, int]]:
    return [(int(s), int(e), step) for s, e in zip(u[0].tolist(), u[1].tolist()) if e > s]


def step_tracks(t: RankTrace, wins: list[Window]) -> RankTracks:
    """Exposed communication (comm − compute) and idle (the window − everything) per analysis window; on a GPU
    trace the idle comes split by cause, as the idle attribution splits it."""
    tl = timeline(t)
    split = idle_intervals(t, wins)
    out = RankTracks()
    for j, w in enumerate(wins):
        comp, comm, other = (iv.within(u, w.start, w.end) for u in (tl.compute, tl.comm, tl.other))
        out.exposed += step_pairs(iv.difference(comm, comp), w.step)
        if split is None:
            whole = (np.array([w.start], np.int64), np.array([w.end], np.int64))
            out.idle += step_pairs(iv.difference(whole, iv.union_of(comp, comm, other)), w.step)
        else:
            out.idle += sorted((s, e, w.step, cause, op) for cause, op, u in split[j].parts
                               for s, e, _ in step_pairs(u, w.step))
    return out


