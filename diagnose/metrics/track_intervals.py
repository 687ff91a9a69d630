"""The intervals the metrics measure, per rank, as tracks for the annotated timeline (`analyze --timeline`).

Computed in the analysis itself, never by a second pass: `step_tracks` in each rank's job (per_rank.py) from
the trace it is analysing, `bubble_tracks` and `wait_tracks` in the cross-rank assembly from the pipeline
it inferred and the collectives it matched, on the clock shift it applied. All on the rank's own clock (int
ns); the exporter adds the rank's `clock_shift_ns`. So the exposed-communication intervals of a step sum to the step's
`exposed_comm_ms`, its idle intervals to `idle_ms`, and a stage's bubble intervals to window − busy. On a GPU
trace the idle intervals are those of the idle attribution (`idle.idle_intervals`), one per cause (and op, for
blocking runtime calls): per cause they sum to the rank's `IdleBreakdown`, and together they are window − busy.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from diagnose.io.trace import RankTrace
from diagnose.metrics import intervals as iv
from diagnose.metrics.idle import idle_intervals
from diagnose.metrics.overlap import timeline
from diagnose.metrics.pipeline.actions import Action
from diagnose.metrics.skew import Collectives, arrival_waits, group_label
from diagnose.metrics.steps import Window


@dataclass
class RankTracks:
    """Intervals (start ns, end ns, step) on the rank's own clock, by track name."""

    exposed: list[tuple[int, int, int]] = field(default_factory=list)
    idle: list[tuple] = field(default_factory=list)  # (start, end, step, cause, op) on GPU, (start, end, step) on CPU
    bubble: list[tuple[int, int, int]] = field(default_factory=list)
    waits: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, "kind pg")


def _clip(u: iv.Union, lo: int, hi: int) -> iv.Union:
    s, e = u
    a = np.searchsorted(e, lo, side="right")
    b = np.searchsorted(s, hi, side="left")
    return np.clip(s[a:b], lo, hi), np.clip(e[a:b], lo, hi)


def _pairs(u: iv.Union, step: int) -> list[tuple[int, int, int]]:
    return [(int(s), int(e), step) for s, e in zip(u[0].tolist(), u[1].tolist()) if e > s]


def step_tracks(t: RankTrace, wins: list[Window]) -> RankTracks:
    """Exposed communication (comm − compute) and idle (the window − everything) per analysis window; on a GPU
    trace the idle comes split by cause, as the idle attribution splits it."""
    tl = timeline(t)
    split = idle_intervals(t, wins)
    out = RankTracks()
    for j, w in enumerate(wins):
        comp, comm, other = (_clip(u, w.start, w.end) for u in (tl.compute, tl.comm, tl.other))
        out.exposed += _pairs(iv.difference(comm, comp), w.step)
        if split is None:
            whole = (np.array([w.start], np.int64), np.array([w.end], np.int64))
            out.idle += _pairs(iv.difference(whole, iv.union_of(comp, comm, other)), w.step)
        else:
            out.idle += sorted((s, e, w.step, cause, op) for cause, op, u in split[j].parts
                               for s, e, _ in _pairs(u, w.step))
    return out


def bubble_tracks(group: list[int], actions: dict[int, list[Action]], shift: dict[int, int]) -> dict[int, list]:
    """Per rank of one pipeline replica: each step's pipeline window (earliest action start to latest end
    over the replica) minus the rank's busy union, as `_measure` counts it. `actions` are on the aligned
    clock (as the cross-rank pass holds them); returned on each rank's own clock (minus `shift`)."""
    g = [r for r in group if actions.get(r)]
    if not g:
        return {}
    steps = sorted(set.intersection(*[{a.step for a in actions[r]} for r in g]))
    by_step: dict[int, defaultdict] = {r: defaultdict(list) for r in g}
    for r in g:
        for a in actions[r]:
            by_step[r][a.step].append(a)
    out: dict[int, list] = defaultdict(list)
    for step in steps:
        acts = {r: by_step[r][step] for r in g}
        lo = min(a.start for r in g for a in acts[r])
        hi = max(a.end for r in g for a in acts[r])
        for r in g:
            busy = iv.union(np.array([a.start for a in acts[r]], np.int64), np.array([a.end for a in acts[r]], np.int64))
            gaps = iv.difference((np.array([lo], np.int64), np.array([hi], np.int64)), busy)
            out[r] += [(s - shift[r], e - shift[r], step) for s, e, _ in _pairs(gaps, step)]
    return out


def wait_tracks(colls: dict[int, Collectives], shift: dict[int, int]) -> dict[int, list]:
    """Straggler waits: at each collective matched on >= 2 ranks (the skew analysis's own matching, keyed on
    the resolved process group, so no wait pairs ranks of different groups; `colls` on the aligned clock),
    every rank waits from its own arrival to the last arrival; the earliest rank's wait is that collective's
    skew. Times come back on each rank's own clock."""
    waits = arrival_waits(colls)
    return {r: [(s - shift[r], e - shift[r], f"{kind} {group_label(pg)}".strip()) for s, e, (pg, kind) in xs]
            for r, xs in waits.items()}
