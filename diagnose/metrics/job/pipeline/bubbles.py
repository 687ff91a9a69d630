"""Pipeline bubbles per stage: measured, replayed and the schedule formula, and why they differ.

Measured bubble of a pipeline rank in a step = 1 − |U(its F/B/I/W spans)| / W, where W is the pipeline
window of that step: first action start to last action end over all ranks of the same pipeline (clocks
aligned). That is the quantity the formula (p−1)/(m+p−1) describes. The replay (replay.py) runs the
observed per-rank orders with the measured per-microbatch durations and no communication cost: it is one use
of the what-if engine, filled in by diagnose.simulate.replay.complete_pipeline (a stage above metrics), which
then writes the explanation.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action, theory_bubble
from llmdiag.diagnose.model.analysis import PipelineResult, StageBubble
from llmdiag.diagnose.model.format import NS_PER_MS


def analyse_pipeline(
    actions: dict[int, list[Action]],  # rank -> actions with times on the common clock (ns)
    groups: list[list[int]],  # ranks of each pipeline replica, in stage order
    schedule: str,
    microbatches: int | None,
    stages_per_rank: int | None,
) -> PipelineResult | None:
    ranks = [r for r in actions if actions[r]]
    if not ranks:
        return None
    p = max(len(g) for g in groups) if groups else len(ranks)
    stages = sorted({a.stage for r in ranks for a in actions[r]})
    m = microbatches or len({a.microbatch for r in ranks for a in actions[r] if a.microbatch >= 0})  # a V's W: -1
    v = stages_per_rank or max(1, len(stages) // max(p, 1))
    theory = theory_bubble(schedule, p, m, v)

    bubbles: list[StageBubble] = []
    windows = []
    busy_by_rank: dict[int, float] = {}
    for group in groups:
        g = [r for r in group if actions.get(r)]
        if not g:
            continue
        steps = sorted(set.intersection(*[{a.step for a in actions[r]} for r in g]))
        if not steps:
            continue
        window, busy = _measure(g, actions, steps)
        windows.append(window)
        for r in g:
            b = float(np.mean(busy[r]))
            busy_by_rank[r] = b
            measured = 1 - b / window if window > 0 else 0.0
            stage = min(a.stage for a in actions[r])
            bubbles.append(StageBubble(stage=stage, rank=r, busy_ms=b, measured=measured,
                                       replay=None, theory=theory,
                                       gap=measured - theory))
    if not bubbles:
        return None
    measured = float(np.mean([b.measured for b in bubbles]))
    busy_vals = list(busy_by_rank.values())
    imbalance = (max(busy_vals) / np.mean(busy_vals) - 1) if busy_vals and np.mean(busy_vals) > 0 else None
    result = PipelineResult(
        schedule=schedule, stages=p, stages_per_rank=v, microbatches=m,
        window_ms=float(np.mean(windows)), replay_window_ms=None,
        stage_bubbles=sorted(bubbles, key=lambda b: (b.stage, b.rank)), measured=measured, replay=None,
        theory=theory, imbalance=float(imbalance) if imbalance is not None else None, explanation="",
    )
    result.groups = [list(g) for g in groups] or [ranks]
    return result  # its explanation is written once it is complete (model/format.py pipeline_explanation)


def _measure(g: list[int], actions: dict[int, list[Action]], steps: list[int]) -> tuple[float, dict[int, list[float]]]:
    """(mean pipeline window, each rank's busy ms per step) of one pipeline replica over the given steps."""
    busy: dict[int, list[float]] = defaultdict(list)
    win_ms = []
    for step in steps:
        acts = {r: [a for a in actions[r] if a.step == step] for r in g}
        lo = min(a.start for r in g for a in acts[r])
        hi = max(a.end for r in g for a in acts[r])
        win_ms.append((hi - lo) / NS_PER_MS)
        for r in g:
            u = iv.union(np.array([a.start for a in acts[r]]), np.array([a.end for a in acts[r]]))
            busy[r].append(iv.total(u) / NS_PER_MS)
    return float(np.mean(win_ms)), busy
