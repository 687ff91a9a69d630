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
