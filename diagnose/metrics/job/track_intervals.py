"""Timeline tracks only the cross-rank pass can draw: pipeline bubbles and collective waits.

`bubble_tracks` from the pipeline it inferred and `wait_tracks` from the collectives it matched, on the clock
shift it applied; each rank's own tracks come from its worker (rank/track_intervals.py). All on the rank's own
clock (int ns); the exporter adds the rank's `clock_shift_ns`. A stage's bubble intervals sum to window − busy."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.metrics.rank.collectives import Collectives
from llmdiag.diagnose.metrics.job.skew import arrival_waits, group_label
from llmdiag.diagnose.metrics.rank.track_intervals import step_pairs


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
            out[r] += [(s - shift[r], e - shift[r], step) for s, e, _ in step_pairs(gaps, step)]
    return out



def wait_tracks(colls: dict[int, Collectives], shift: dict[int, int]) -> dict[int, list]:
    """Straggler waits: at each collective matched on >= 2 ranks (the skew analysis's own matching, keyed on
    the resolved process group, so no wait pairs ranks of different groups; `colls` on the aligned clock),
    every rank waits from its own arrival to the last arrival; the earliest rank's wait is that collective's
    skew. Times come back on each rank's own clock."""
    waits = arrival_waits(colls)
    return {r: [(s - shift[r], e - shift[r], f"{kind} {group_label(pg)}".strip()) for s, e, (pg, kind) in xs]
            for r, xs in waits.items()}
