"""Interval algebra on int64 nanosecond arrays.

Every time sum in llmdiag is over a union: concurrent streams or threads never count twice. Unions are
(starts, ends) arrays, sorted and disjoint; all operations are vectorised (sort + cumulative max).
"""

from __future__ import annotations

import numpy as np

from diagnose.metrics.sets import distinct
Union = tuple[np.ndarray, np.ndarray]


def union(starts: np.ndarray, ends: np.ndarray) -> Union:
    """Merge intervals into sorted disjoint ones; touching intervals merge, empty ones vanish."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_e = np.maximum.reduceat(e, idx)
    return s[idx], out_e


def total(u: Union) -> int:
    return int((u[1] - u[0]).sum())


def covered_upto(u: Union, x: np.ndarray) -> np.ndarray:
    """|U ∩ (−∞, x]| for each x."""
    us, ue = u
    x = np.asarray(x, np.int64)
    if len(us) == 0:
        return np.zeros(x.shape, np.int64)
    cum = np.concatenate(([0], np.cumsum(ue - us)))
    i = np.searchsorted(us, x, side="right")  # intervals starting at or before x
    prev = cum[np.maximum(i - 1, 0)]
    last_s = us[np.maximum(i - 1, 0)]
    last_e = ue[np.maximum(i - 1, 0)]
    partial = np.clip(np.minimum(x, last_e) - last_s, 0, None)
    return np.where(i > 0, prev + partial, 0)


def overlap_each(starts: np.ndarray, ends: np.ndarray, u: Union) -> np.ndarray:
    """|[s, e] ∩ U| for each interval (the intervals themselves may overlap one another)."""
    return covered_upto(u, ends) - covered_upto(u, starts)


def intersect_total(a: Union, b: Union) -> int:
    """|A ∩ B| for two unions."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0
    return int(overlap_each(a[0], a[1], b).sum())


def union_of(*us: Union) -> Union:
    return union(np.concatenate([u[0] for u in us]), np.concatenate([u[1] for u in us]))


def difference(a: Union, b: Union) -> Union:
    """A − B for two unions."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    # Boundaries of A and B together; keep the elementary pieces inside A and outside B.
    pts = distinct(np.concatenate([a[0], a[1], b[0], b[1]]))
    lo, hi = pts[:-1], pts[1:]
    mid_in_a = overlap_each(lo, hi, a) == (hi - lo)
    mid_in_b = overlap_each(lo, hi, b) > 0
    keep = mid_in_a & ~mid_in_b
    return union(lo[keep], hi[keep])
