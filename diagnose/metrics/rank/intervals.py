"""Interval algebra on int64 nanosecond arrays.

Every time sum in llmdiag is over a union: concurrent streams or threads never count twice. Unions are
(starts, ends) arrays, sorted and disjoint; all operations are vectorised (sort + cumulative max).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.sets import distinct
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


def clip(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """np.clip(x, lo, hi) of int64 times as two ufuncs: np.clip's Python wrapper costs more than the work on the
    few intervals of a window, and the idle and step breakdowns clip hundreds of times per trace."""
    return np.minimum(np.maximum(x, lo), hi)


def within(u: Union, lo: int, hi: int) -> Union:
    """The part of a union inside [lo, hi], still a union (binary search: a step touches only its own intervals,
    and the clipped pieces of disjoint intervals stay disjoint and non-empty)."""
    s, e = u
    if hi <= lo:
        return s[:0], e[:0]
    a = np.searchsorted(e, lo, side="right")
    b = np.searchsorted(s, hi, side="left")
    return clip(s[a:b], lo, hi), clip(e[a:b], lo, hi)


def total(u: Union) -> int:
    return int((u[1] - u[0]).sum())


def covered_upto(u: Union, x: np.ndarray) -> np.ndarray:
    """|U ∩ (−∞, x]| for each x."""
    us, ue = u
    x = np.asarray(x, np.int64)
    if len(us) == 0:
        return np.zeros(x.shape, np.int64)
    return _covered(us, ue, np.cumsum(ue - us), x)


def _covered(us: np.ndarray, ue: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """covered_upto with the union's running lengths (`cum`) given. The small idle and overlap unions call
    this hundreds of times per trace, so it is a handful of ufuncs (np.clip's Python wrapper cost more than
    the arithmetic)."""
    i = np.searchsorted(us, x, side="right")  # intervals starting at or before x
    j = np.maximum(i - 1, 0)  # the last of them
    done = cum[j] - (ue[j] - us[j])  # the intervals before it, whole
    partial = np.maximum(np.minimum(x, ue[j]) - us[j], 0)
    return np.where(i > 0, done + partial, 0)


def overlap_each(starts: np.ndarray, ends: np.ndarray, u: Union) -> np.ndarray:
    """|[s, e] ∩ U| for each interval (the intervals themselves may overlap one another)."""
    us, ue = u
    if len(us) == 0:
        return np.zeros(np.shape(starts), np.int64)
    cum = np.cumsum(ue - us)
    return _covered(us, ue, cum, np.asarray(ends, np.int64)) - _covered(us, ue, cum, np.asarray(starts, np.int64))


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
