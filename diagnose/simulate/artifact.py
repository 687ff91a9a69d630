"""The what-if analysis of one op table of the straggler study's artifact: its dependency graph
(diagnose.simulate.megatron) replayed by diagnose.simulate.whatif, and its pipeline per stage as traced."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.megatron_ops import OpTable
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.model.whatif import StageLoad, WhatIf
from llmdiag.diagnose.simulate.engine import CycleError
from llmdiag.diagnose.simulate.megatron import BWD, COMM_TYPES, FWD, P2P, build
from llmdiag.diagnose.simulate.whatif import SimJob, analyse

MS = 1e3  # the artifact's times are seconds
# reported as the artifact reports them: the four p2p kinds folded into one per direction
P2P_LABEL = {k: f"{v[0]}-pp-comm" for k, v in P2P.items()}


def whatif_of_table(t: OpTable) -> WhatIf:
    names = np.asarray(t.optypes, dtype=object)[t.optype]
    steps = np.unique(t.step)
    jg = build(t)
    stages, imbalance = stage_loads(t, names)
    timed = np.bincount(np.searchsorted(steps, t.step), weights=t.duration, minlength=len(steps)) > 0
    missing = jg.missing if jg.graph is None else [] if timed.all() else [
        f"{int((~timed).sum())} of {len(steps)} steps have no op that takes time (every duration 0): nothing to "
        "replay"]
    if missing:
        return WhatIf("megatron-ops", len(np.unique(t.rank)), len(steps), t.n, missing=missing, stages=stages,
                      imbalance=imbalance)
    job = SimJob("megatron-ops", jg.graph, jg.in_group, t.start * MS, t.duration * MS, names,
                 np.isin(names, list(COMM_TYPES)), t.stage, t.dp_rank, t.rank, np.searchsorted(steps, t.step),
                 [int(s) for s in steps], P2P_LABEL)
    try:
        w = analyse(job)
    except CycleError as e:
        return WhatIf("megatron-ops", len(np.unique(t.rank)), len(steps), t.n, stages=stages, imbalance=imbalance,
                      missing=[f"the dependency model contradicts the trace's order: {e}"])
    w.stages, w.imbalance = stages, imbalance
    return w


def stage_loads(t: OpTable, names) -> tuple[list[StageLoad], float | None]:
    """Per worker and step: compute = |U(forward/backward compute)|, window = first compute start to last
    compute end over the stages of its DP replica; bubble = 1 − compute / window. Means per stage."""
    comp = np.isin(names, (FWD, BWD))
    ns_s = (t.start[comp] * 1e9).astype(np.int64)
    ns_e = ((t.start[comp] + t.duration[comp]) * 1e9).astype(np.int64)
    dp, st, step = t.dp_rank[comp], t.stage[comp], t.step[comp]
    busy: dict[int, list[float]] = {}
    bubble: dict[int, list[float]] = {}
    for d in np.unique(dp):
        for k in np.unique(step[dp == d]):
            rep = (dp == d) & (step == k)
            window = ns_e[rep].max() - ns_s[rep].min()
            for s in np.unique(st[rep]):
                m = rep & (st == s)
                b = iv.total(iv.union(ns_s[m], ns_e[m]))
                busy.setdefault(int(s), []).append(b / 1e6)
                bubble.setdefault(int(s), []).append(1 - b / window if window > 0 else 0.0)
    loads = [StageLoad(s, float(np.mean(busy[s])), float(np.mean(bubble[s]))) for s in sorted(busy)]
    mean = np.mean([x.compute_ms for x in loads]) if loads else 0.0
    imbalance = float(max(x.compute_ms for x in loads) / mean - 1) if mean > 0 else None
    return loads, imbalance
