"""Host-side collectives repeated once per iteration, one call far longer than the others (model/outlier_steps.py
CollectiveRepeat says why).

Only where the steps cannot tell an outlier step (at most outlier_ops.MIN_STEPS analysis windows: a CPU-only
capture with one ProfilerStep covering one of several iterations, hta's cpu_only_rank-34): the host-side
collective spans (gloo work on its threads; device collectives are kernels, whose time includes the wait for
peers at every call and which the step route reads) are grouped by (thread, name, Input Dims) over the whole
capture; a group of at least MIN_CALLS calls repeats once per iteration, and its outlier calls are those
outlier_ops.outlier_windows finds among the call durations at RATIO (the first call left out, as a first step
is: connection set-up). The longest group's outlier is kept first. Linear in events.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.io.trace import COMM, RankTrace
from llmdiag.diagnose.metrics.rank.outlier_ops import MIN_EXCESS_MS, MIN_STEPS, outlier_windows
from llmdiag.diagnose.metrics.rank.sets import median
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.outlier_steps import CollectiveRepeat

RATIO = 1.5  # a collective's call this × the median of its repeats (calls wait on peers: more scatter than steps)
MIN_CALLS = MIN_STEPS + 1
MAX_RECORDS = 4


def collective_repeats(t: RankTrace, wins: list[Window]) -> list[CollectiveRepeat]:
    if t.kind is None or not len(t) or len(wins) > MIN_STEPS:
        return []
    idx = np.flatnonzero((t.kind == COMM) & (t.stream < 0))
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i in idx.tolist():
        dims = (t.comm_args.get(i) or {}).get("Input Dims")
        groups[(int(t.thread[i]), int(t.name[i]), str(dims)[:120] if dims else "")].append(i)
    t0 = int(t.ts.min())
    starts = np.array([w.host_start for w in wins], np.int64)
    ends = np.array([w.host_end for w in wins], np.int64)
    found = []
    for (th, nm, shape), calls in groups.items():
        if len(calls) < MIN_CALLS:
            continue
        durs = [t.dur[i] / NS_PER_MS for i in calls]
        out, med = outlier_windows(durs, RATIO)
        periods = [(t.ts[b] - t.ts[a]) / NS_PER_MS for a, b in zip(calls, calls[1:])]
        typical = [p for j, p in enumerate(periods) if j not in out]  # iterations with no outlier call
        mper = median(typical) if typical else None
        for j in out:
            if durs[j] - med < MIN_EXCESS_MS:
                continue
            i = calls[j]
            k = int(np.searchsorted(starts, t.ts[i], side="right")) - 1
            found.append(CollectiveRepeat(
                name=t.names[nm][:120], thread=(t.thread_name(th) or f"thread {t.threads[th][1]}")[:80], shape=shape,
                calls=len(calls), index=j + 1, start_ms=(int(t.ts[i]) - t0) / NS_PER_MS, ms=durs[j], median_ms=med,
                period_ms=periods[j] if j < len(periods) else None, median_period_ms=mper,
                in_steps=bool(k >= 0 and t.ts[i] < ends[k])))
    for f in found:  # outlier calls of other groups running at the same time: the iteration, not one call
        f.with_it = sum(1 for g in found if g is not f and g.start_ms < f.start_ms + f.ms and f.start_ms < g.start_ms + g.ms)
    return sorted(found, key=lambda f: -(f.ms - f.median_ms))[:MAX_RECORDS]
