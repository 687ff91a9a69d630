"""The intervals the metrics measure, per rank, as tracks for the annotated timeline.

Each track is computed by the same functions the metrics use (`overlap.timeline`, `steps.windows`,
`pipeline_actions.extract_actions`, the skew's matching key), on the rank's own clock (int ns); the caller
shifts them onto the aligned clock. So the exposed-communication intervals of a step sum to the step's
`exposed_comm_ms`, its idle intervals to `idle_ms`, and a stage's bubble intervals to window − busy. On a GPU
trace the idle intervals are those of the idle attribution (`idle.idle_intervals`), one per cause (and op, for
blocking runtime calls): per cause they sum to the rank's `IdleBreakdown`, and together they are window − busy.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from diagnose.io.trace import COMM, RankTrace
from diagnose.metrics import intervals as iv
from diagnose.metrics.classify import collective_kind
from diagnose.metrics.idle import idle_intervals
from diagnose.metrics.overlap import gloo_collective_labels, in_windows, pg_label, timeline
from diagnose.metrics.pipeline_actions import Action
from diagnose.metrics.steps import Window
from diagnose.model.roles import P2P_KINDS


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
    over the replica, on the aligned clock) minus the rank's busy union, as `_measure` counts it. Returned
    on each rank's own clock."""
    g = [r for r in group if actions.get(r)]
    if not g:
        return {}
    steps = sorted(set.intersection(*[{a.step for a in actions[r]} for r in g]))
    out: dict[int, list] = defaultdict(list)
    for step in steps:
        acts = {r: [a for a in actions[r] if a.step == step] for r in g}
        lo = min(a.start + shift[r] for r in g for a in acts[r])
        hi = max(a.end + shift[r] for r in g for a in acts[r])
        for r in g:
            busy = iv.union(np.array([a.start + shift[r] for a in acts[r]], np.int64),
                            np.array([a.end + shift[r] for a in acts[r]], np.int64))
            gaps = iv.difference((np.array([lo], np.int64), np.array([hi], np.int64)), busy)
            out[r] += [(s - shift[r], e - shift[r], step) for s, e, _ in _pairs(gaps, step)]
    return out


def collectives(t: RankTrace, wins: list[Window]) -> list[tuple[tuple[str, str], int, int, int]]:
    """((pg, kind), ordinal, start, end) of the rank's collectives, matched across ranks by (key, ordinal)
    as the skew analysis matches them (point-to-point left out)."""
    idx = np.flatnonzero(in_windows(t, t.kind == COMM, wins))
    relabel = gloo_collective_labels(t, idx)
    seen: dict[tuple, int] = defaultdict(int)
    out = []
    for i in idx.tolist():
        args = t.comm_args.get(i, {})
        kind = relabel.get(i) or collective_kind(t.names[t.name[i]], args)
        if kind in P2P_KINDS:
            continue
        pg = pg_label(args)
        if args.get("Process Group Ranks"):
            pg = f"{pg}{args['Process Group Ranks']}"
        key = (pg, kind)
        out.append((key, seen[key], int(t.ts[i]), int(t.ts[i] + t.dur[i])))
        seen[key] += 1
    return out


def wait_tracks(colls: dict[int, list], shift: dict[int, int]) -> dict[int, list]:
    """Straggler waits: at each collective matched on ≥ 2 of these ranks, every rank waits from its own
    arrival to the last arrival (aligned clock); the earliest rank's wait is that collective's skew."""
    by: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for r, cs in colls.items():
        for key, n, s, _ in cs:
            by[(key, n)].append((r, s + shift[r]))
    out: dict[int, list] = defaultdict(list)
    for ((pg, kind), _), arr in by.items():
        if len(arr) < 2:
            continue
        last = max(s for _, s in arr)
        for r, s in arr:
            if last > s:
                out[r].append((s - shift[r], last - shift[r], f"{kind} {pg}".strip()))
    return out
