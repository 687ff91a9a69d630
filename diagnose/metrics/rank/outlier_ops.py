"""Which host ops took the extra time of a rank's outlier steps (model/outlier_steps.py says why).

A step is an outlier when its span is at least RATIO × the median span of the rank's steps after the first (the
first captured step is warm-up or capture-start: rules that read it handle it), at least MIN_EXCESS_MS longer,
and NOISE × the steps' median absolute deviation above the median (jitter of a few percent is no outlier). At
least MIN_STEPS steps after the first are needed: a median of fewer says nothing about a typical step.

For each outlier step, every top-level host op (not nested in another host op on its thread; ProfilerStep left
out) is summed per (thread, name) and compared with the median of the same sum over the typical steps (the steps
after the first that are not outliers); the thread's time with no top-level op is one more entry (op ""). The
entries that grew most are kept, each with the op directly under it whose own sum grew most. The typical step's
medians are taken over at most MAX_TYPICAL of them, evenly spaced. Linear in events after the sorts top_level
makes; nothing is read unless a step is an outlier.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.classify import HOST_CATS_OP, top_level
from llmdiag.diagnose.metrics.rank.sets import median
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.outlier_steps import OpGrowth, OutlierStepOps, ThreadGrowth

RATIO = 1.2  # an outlier step is at least this × the median step ...
MIN_EXCESS_MS = 1.0  # ... at least this much longer ...
NOISE = 5.0  # ... and this × the steps' median absolute deviation above the median
MIN_STEPS = 3  # steps after the first
TOP = 3  # grown entries kept per outlier step
SPREAD_MS, SPREAD_SHARE = 0.5, 0.2  # an entry counts as grown (OutlierStepOps.grown) from this much and share up
MAX_OUTLIERS = 10  # outlier steps read per rank, the longest first
MAX_TYPICAL = 64  # typical steps the medians are taken over (evenly spaced), whatever the capture's length


def outlier_windows(spans: list[float], ratio: float = RATIO) -> tuple[list[int], float]:
    """(indices of the outlier spans, the median span after the first); spans in any unit, the first is left out."""
    rest = spans[1:]
    if len(rest) < MIN_STEPS:
        return [], 0.0
    med = median(rest)
    mad = median([abs(x - med) for x in rest])
    out = [i for i, x in enumerate(spans) if i > 0 and x >= ratio * med and x - med >= max(NOISE * mad, 0.0)]
    return out, med


def outlier_ops(t: RankTrace, wins: list[Window]) -> list[OutlierStepOps]:
    """The outlier steps of a rank with their most grown host ops; [] where it has none."""
    if t.kind is None or not len(t) or not wins:
        return []
    spans = [(w.end - w.start) / NS_PER_MS for w in wins]
    out, med = outlier_windows(spans)
    out = [i for i in out if spans[i] - med >= MIN_EXCESS_MS]
    if not out:
        return []
    out = sorted(sorted(out, key=lambda i: -spans[i])[:MAX_OUTLIERS])
    typical = [i for i in range(1, len(wins)) if i not in set(out)]
    if not typical:
        return []
    typical = typical[::-(-len(typical) // MAX_TYPICAL)]  # a median over an evenly spaced sample of them
    keep = np.array(sorted(set(out) | set(typical)), np.int64)
    host = (t.stream < 0) & t.cat_mask(*HOST_CATS_OP, "user_annotation")
    host &= ~t.name_mask(lambda n: n.startswith("ProfilerStep#"), host)
    top = top_level(t, host)
    child = top_level(t, host & ~top)  # the ops directly under a top-level op
    starts = np.array([w.host_start for w in wins], np.int64)
    ends = np.array([w.host_end for w in wins], np.int64)

    def per_window(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.flatnonzero(mask)
        k = np.searchsorted(starts, t.ts[idx], side="right") - 1
        ok = (k >= 0) & (t.ts[idx] < ends[np.maximum(k, 0)])
        ok &= np.isin(k, keep)
        return idx[ok], k[ok]

    ti, tk = per_window(top)
    sums: dict[tuple, dict[int, int]] = _sum_by((t.thread[ti], t.name[ti]), tk, t.dur[ti])  # (thread, name) -> win -> ns
    busy: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # thread -> win -> ns of top-level ops
    for (th, _), by in sums.items():
        for k, v in by.items():
            busy[th][k] += v
    u = iv.union(t.ts[ti], t.ts[ti] + t.dur[ti])  # no host op on any thread: un-instrumented work, or all waiting
    sums[(-1, -1)] = {k: int(ends[k] - starts[k]) - iv.total(iv.within(u, int(starts[k]), int(ends[k])))
                      for k in keep.tolist()}
    rt = _runtime_idle(t, starts, ends, keep)
    ci, ck = per_window(child)
    parent = _parents(t, ti, ci)
    has = parent >= 0
    ci, ck, parent = ci[has], ck[has], parent[has]
    kids = _sum_by((t.thread[ci], t.name[parent], t.name[ci]), ck, t.dur[ci])  # (thread, parent, name) -> win -> ns

    def typ(by) -> float:
        return median([by.get(k, 0) for k in typical]) / NS_PER_MS

    meds = {key: typ(by) for key, by in sums.items()}  # each key's typical step, once
    host_med = median([sum(v.get(k, 0) for th, v in busy.items()) for k in typical]) / NS_PER_MS
    res = []
    for w in out:
        grow = sorted(((by.get(w, 0) / NS_PER_MS - meds[key], key) for key, by in sums.items()), reverse=True)
        host_ms = sum(v.get(w, 0) for v in busy.values()) / NS_PER_MS
        ops = []
        for g, (th, nm) in grow[:TOP]:
            if g <= 0:
                break
            by = sums[(th, nm)]
            e = OpGrowth(thread=_thread(t, th), op=t.names[nm][:160] if nm >= 0 else "",
                         ms=by.get(w, 0) / NS_PER_MS, median_ms=meds[(th, nm)])
            cands = [(kb.get(w, 0) / NS_PER_MS - typ(kb), c) for (kth, p, c), kb in kids.items() if kth == th and p == nm]
            if nm >= 0 and cands:
                cg, c = max(cands)
                if cg > 0:
                    kb = kids[(th, nm, c)]
                    e.child, e.child_ms, e.child_median_ms = t.names[c][:160], kb.get(w, 0) / NS_PER_MS, typ(kb)
            ops.append(e)
        grown = sum(1 for g, (th, nm) in grow if nm >= 0 and g >= SPREAD_MS and g >= SPREAD_SHARE * meds[(th, nm)])
        threads = sorted(((by.get(w, 0) / NS_PER_MS - typ(by), th) for th, by in busy.items()), reverse=True)
        res.append(OutlierStepOps(step=wins[w].step, time_ms=spans[w], median_ms=med, host_ms=host_ms,
                                  host_median_ms=host_med, runtime_idle_ms=rt[w],
                                  runtime_idle_median_ms=median([rt[k] for k in typical]), grown=grown, ops=ops,
                                  threads=[ThreadGrowth(_thread(t, th), busy[th].get(w, 0) / NS_PER_MS,
                                                        typ(busy[th])) for g, th in threads[:TOP] if g > 0]))
    return res


def _runtime_idle(t: RankTrace, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray) -> dict[int, float]:
    """window -> ms of device idle (no device op on any stream) inside runtime API calls in its host span: a
    blocking copy, synchronize or malloc holding the device idle (a sync waiting on busy device work is not idle)."""
    ri = np.flatnonzero((t.kind == RUNTIME) & (t.stream < 0))
    dev = np.flatnonzero((t.stream >= 0) & (t.kind != ANNOTATION))
    calls = iv.union(t.ts[ri], t.ts[ri] + t.dur[ri])
    busy = iv.union(t.ts[dev], t.ts[dev] + t.dur[dev])
    out = {}
    for k in keep.tolist():
        w = iv.within(calls, int(starts[k]), int(ends[k]))
        out[k] = (iv.total(w) - iv.intersect_total(w, busy)) / NS_PER_MS
    return out


def _thread(t: RankTrace, th: int) -> str:
    """A thread's name as the trace gives it, else its id ("" for the all-threads entry)."""
    return "" if th < 0 else (t.thread_name(th) or f"thread {t.threads[th][1]}")[:80]


def _sum_by(cols: tuple, win: np.ndarray, dur: np.ndarray) -> dict[tuple, dict[int, int]]:
    """key (one int per column) -> window -> summed ns, in one vectorised pass (a Python step per distinct pair)."""
    out: dict[tuple, dict[int, int]] = defaultdict(dict)
    if not len(win):
        return out
    keys, inv = np.unique(np.stack([*[np.asarray(c, np.int64) for c in cols], win.astype(np.int64)], 1), axis=0,
                          return_inverse=True)
    tot = np.bincount(inv.ravel(), weights=dur.astype(np.float64), minlength=len(keys))
    for row, v in zip(keys.tolist(), tot.tolist()):
        out[tuple(row[:-1])][row[-1]] = int(v)
    return out


def _parents(t: RankTrace, tops: np.ndarray, kids: np.ndarray) -> np.ndarray:
    """For each of `kids`, the top-level op of `tops` on its thread that starts at or before it and is still
    running (-1 none): per thread, the last such op by start (top-level ops of a thread do not overlap)."""
    out = np.full(len(kids), -1, np.int64)
    for th in np.unique(t.thread[kids]).tolist():
        tt = tops[t.thread[tops] == th]
        tt = tt[np.argsort(t.ts[tt], kind="stable")]
        sel = np.flatnonzero(t.thread[kids] == th)
        j = np.searchsorted(t.ts[tt], t.ts[kids[sel]], side="right") - 1
        ok = j >= 0
        p = tt[np.maximum(j, 0)]
        ok &= t.ts[kids[sel]] < t.ts[p] + t.dur[p]
        out[sel[ok]] = p[ok]
    return out
