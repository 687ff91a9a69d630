"""Distinct values and membership of integer columns, the answers of np.unique / np.isin without their cost.

A plain np.unique(x) (no return_* flag), and np.isin on a long list (its sort path), call numpy.ma.is_masked,
whose first use imports numpy.ma: about 20 ms, a sixth of a small trace's whole analysis, paid by every run.
The columns these serve (name, thread and correlation ids, ns times) are integers, where a sort and a
neighbour comparison give exactly np.unique's sorted answer; anything else goes to numpy as before.
"""

from __future__ import annotations

import numpy as np


def distinct(a) -> np.ndarray:
    """np.unique(a): the sorted distinct values."""
    a = np.asarray(a).ravel()
    if a.dtype.kind not in "iub":
        return np.unique(a)
    s = np.sort(a)
    keep = np.ones(len(s), bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def member(a, b) -> np.ndarray:
    """np.isin(a, b): which elements of `a` are in `b`."""
    a, u = np.asarray(a), distinct(b)
    if a.dtype.kind not in "iub" or u.dtype.kind not in "iub":
        return np.isin(a, b)
    if not len(u) or not len(a):
        return np.zeros(a.shape, bool)
    i = np.searchsorted(u, a)
    i[i == len(u)] = 0
    return u[i] == a


def median(x) -> float:
    """np.median of an array without NaN (NaN when empty, as np.median), minus its lazy numpy.ma import."""
    x = np.asarray(x)
    n = len(x)
    if not n:
        return float("nan")
    part = np.partition(x, [(n - 1) // 2, n // 2])
    return (float(part[(n - 1) // 2]) + float(part[n // 2])) / 2


def percentile(x, q: float) -> float:
    """np.percentile(x, q) (its default linear interpolation) of a non-empty array without NaN, without the
    numpy.ma import."""
    x = np.asarray(x)
    pos = q / 100 * (len(x) - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    part = np.partition(x, [lo, hi])
    return float(part[lo]) + (float(part[hi]) - float(part[lo])) * (pos - lo)
