"""Per top-level host phase, how much of its span an event-sampled capture recorded (model/phase_cover.py).

Phases: user annotations inside the step windows' host spans, ProfilerStep aside, not enclosed by another such
annotation on their thread. Covered: the union of every recorded host op and runtime call (any thread) inside
the phase. On a complete capture the autograd thread's ops cover the backward; on a sample the kept events alone
do (hta/sampled_pair rank 0: `## backward ##` 232 ms per step, 14 % covered). Only computed where the capture
is sampled (the caller decides): a complete capture's bare spans are host work without ops, another finding's.
Linear in events but for sorts."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.phase_cover import PhaseCover

MAX_PHASES = 8  # the longest phases kept


def phase_cover(t: RankTrace, wins: list[Window]) -> list[PhaseCover]:
    if not wins or t.kind is None:
        return []
    a = np.flatnonzero((t.kind == ANNOTATION) & (t.stream < 0))
    if not len(a):
        return []
    a = a[np.array([not t.names[int(n)].startswith("ProfilerStep#") for n in t.name[a].tolist()], bool)]
    starts = np.array([w.host_start for w in wins], np.int64)
    ends = np.array([w.host_end for w in wins], np.int64)
    k = np.searchsorted(starts, t.ts[a], side="right") - 1
    a = a[(k >= 0) & (t.ts[a] + t.dur[a] <= ends[np.maximum(k, 0)])]
    if not len(a):
        return []
    a = a[np.lexsort((-t.dur[a], t.ts[a], t.thread[a]))]
    top, th, end = [], None, -1
    for i in a.tolist():  # sorted by thread, start, longest first: an annotation inside the last top one is nested
        if t.thread[i] != th or t.ts[i] >= end:
            top.append(i)
            th, end = t.thread[i], int(t.ts[i] + t.dur[i])
    top_a = np.asarray(top, np.int64)
    host = np.flatnonzero(t.kind_mask(CPU_OP, RUNTIME) & (t.stream < 0))
    cov = iv.overlap_each(t.ts[top_a], t.ts[top_a] + t.dur[top_a], iv.union(t.ts[host], t.ts[host] + t.dur[host]))
    span: dict[str, float] = defaultdict(float)
    covered: dict[str, float] = defaultdict(float)
    for i, c in zip(top, cov.tolist()):
        n = t.names[int(t.name[i])][:120]
        span[n] += float(t.dur[i])
        covered[n] += float(c)
    nw = len(wins) * NS_PER_MS
    rows = sorted(span, key=lambda n: -span[n])[:MAX_PHASES]
    return [PhaseCover(name=n, span_ms=span[n] / nw, covered_ms=covered[n] / nw) for n in rows]
