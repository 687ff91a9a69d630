"""Gradient accumulation: forward passes per optimizer step, and data-parallel traffic per optimizer step.

A step (ProfilerStep) of an accumulating run holds N forward/backward microsteps and one optimizer step; the
data-parallel gradient reduction runs once (DDP `no_sync`, FSDP2 `set_requires_gradient_sync(False)` on the
others) while FSDP's all-gathers run every microstep. Microsteps are counted from the `llmdiag/forward`
labels per step (the manifest's `grad_accum` where there are none). `regather_ms` measures the all-gathers
launched after a step's second forward began: parameters gathered again in a later microstep; communication is already per step,
i.e. per optimizer step, and is split here by collective kind so the rules can tell per-microstep traffic
(all-gathers) from per-optimizer-step traffic (all-reduce / reduce-scatter).
"""

from __future__ import annotations


import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMM, RankTrace
from llmdiag.diagnose.metrics.rank.classify import collective_kind
from llmdiag.diagnose.metrics.rank.launches import launch_ts
from llmdiag.diagnose.metrics.rank.overlap import gloo_collective_labels

FORWARD = "llmdiag/forward"


def forward_counts(t: RankTrace, wins) -> list[int]:
    """`llmdiag/forward` host spans starting in each step window."""
    ts = _forward_starts(t)
    return [int(((ts >= w.host_start) & (ts < w.host_end)).sum()) for w in wins] if len(ts) else []


def _forward_starts(t: RankTrace) -> np.ndarray:
    ids = t.name_ids(lambda n: n == FORWARD)
    if not len(ids):
        return np.zeros(0, np.int64)
    m = np.isin(t.name, ids) & (t.kind == ANNOTATION) & (t.stream < 0)
    return np.sort(t.ts[m])


def regather_ms(t: RankTrace, wins) -> float:
    """All-gather time per step launched after the step's second forward began: parameters gathered again in a
    later microstep (0 when they stay gathered, or without accumulation). Host launch time decides."""
    starts = _forward_starts(t)
    idx = np.flatnonzero(t.kind == COMM)
    if len(starts) < 2 or not len(idx):
        return 0.0
    relabel = gloo_collective_labels(t, idx)
    total = 0
    for w in wins:
        inside = starts[(starts >= w.host_start) & (starts < w.host_end)]
        if len(inside) < 2:
            continue
        for i in idx.tolist():
            kind = relabel.get(i) or collective_kind(t.names[t.name[i]], t.comm_args.get(i))
            if kind == "allgather" and w.start <= t.ts[i] < w.end and launch_ts(t, i) >= inside[1]:
                total += int(t.dur[i])
    return total / max(1, len(wins)) / 1e6
