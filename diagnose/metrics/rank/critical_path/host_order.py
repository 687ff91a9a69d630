"""The host points of a rank's dependency graph (graph.py) in each thread's nesting order: the THREAD edges join
consecutive ones, and the walk's returns to the device (ahead.py) search them by thread."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import RankTrace


def host_points(t: RankTrace, ev: np.ndarray, hk: np.ndarray, begin: np.ndarray, end: np.ndarray):
    """The host nodes in each thread's nesting order: (nodes, thread per node, +1 begin / -1 end per node).
    At one instant ends come before begins; of two begins the longer (outer) first, of two ends the later
    begun (inner) first. One sort on (thread, time, begin) packed in an int64, the ties (nested ops beginning
    or ending at one ns) ordered apart: a lexsort of five keys over every point cost 2-4 ms a rank."""
    thr = t.thread[ev[hk]]
    n = len(hk)
    bh, eh = begin[hk], end[hk]
    nodes = np.concatenate([2 * hk, 2 * hk + 1])
    tm = np.concatenate([bh, eh])
    th = np.concatenate([thr, thr])
    lo, span = int(tm.min()), int(tm.max()) - int(tm.min()) + 1
    t0, nth = int(thr.min()), int(thr.max()) - int(thr.min()) + 1
    if nth * span >= 2**61:  # times a hostile trace stretched past one key: the five keys
        isb = np.concatenate([np.ones(n, np.int8), np.zeros(n, np.int8)])
        o = np.lexsort((np.concatenate([hk, -hk]), np.concatenate([-(eh - bh), -bh]), isb, tm, th))
        return nodes[o], th[o], np.where(o < n, 1, -1)
    key = (thr.astype(np.int64) - t0) * span
    key = (np.concatenate([key, key]) + (tm - lo)) * 2
    key[:n] += 1  # a begin after an end at one instant
    o = np.argsort(key, kind="stable")
    ks = key[o]
    tie = ks[1:] == ks[:-1]
    if tie.any():  # points at one instant: begins by -duration then event, ends by -begin then -event
        at = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
        sub = o[at]
        k = sub % n
        second = np.where(sub < n, bh[k] - eh[k], -bh[k])
        o[at] = sub[np.lexsort((np.where(sub < n, hk[k], -hk[k]), second, ks[at]))]
    return nodes[o], th[o], np.where(o < n, 1, -1)
