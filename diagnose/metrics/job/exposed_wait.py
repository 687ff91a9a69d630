"""The exposed part of each rank's wait for later peers at matched collectives (job/skew.py).

A rank that reaches a collective before its last peer waits from its own kernel begin to the last peer's: the
wait. Where compute runs beside the collective on another stream, the wait is overlapped, never part of the
rank's exposed communication (`exposed_comm_ms`); only the part with no compute under it, inside the rank's
exposed-communication union (metrics/rank/exposed_union.py), is. The exposed-communication rules take that part
out (rules/comm.py), not the whole wait.

Vectorised over every rank at once: each rank's union is laid on one axis in its own block (its times less its
first interval's start, plus the blocks before it), so one `covered_upto` answers |U_rank ∩ (−∞, t]| for every
row; blocks never overlap, so the union of one rank's waits on that axis is its exposed waiting, counted once
where two collectives on different streams wait at the same time.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank import intervals as iv

Free = tuple[np.ndarray, np.ndarray] | None  # a rank's exposed union on the rows' clock; None: not recorded


def exposed_waits(free: dict[int, Free], rank: np.ndarray, a: np.ndarray,
                  b: np.ndarray) -> tuple[np.ndarray, dict[int, int]]:
    """Per row, ns of its wait [a, b] (b ≤ a: none) inside its rank's exposed union; per rank, ns of the union of
    its waits inside it. A rank whose union is not recorded (None, or absent: summaries built by hand) counts its
    whole waits, as before this was measured."""
    rank, a, b = (np.asarray(x, np.int64) for x in (rank, a, b))
    out = np.zeros(len(rank), np.int64)
    waits = b > a
    if not waits.any():
        return out, {}
    ids, inv = np.unique(rank, return_inverse=True)
    # a rank without its union: one interval over all its waits, so each wait counts whole
    lo_w = np.full(len(ids), np.iinfo(np.int64).max)
    hi_w = np.full(len(ids), np.iinfo(np.int64).min)
    np.minimum.at(lo_w, inv[waits], a[waits])
    np.maximum.at(hi_w, inv[waits], b[waits])
    starts, ends, first, base = [], [], np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
    last = np.zeros(len(ids), np.int64)
    at = 0
    for k, r in enumerate(ids.tolist()):  # one pass over ranks, never over rows
        u = free.get(r)
        if u is None:
            u = (lo_w[k:k + 1], hi_w[k:k + 1]) if lo_w[k] < hi_w[k] else (np.zeros(0, np.int64),) * 2
        if not len(u[0]):
            first[k], last[k], base[k] = 0, -1, at  # nothing exposed: every wait maps to one point
            continue
        first[k], last[k], base[k] = u[0][0], u[1][-1], at
        starts.append(u[0] - u[0][0] + at)
        ends.append(u[1] - u[0][0] + at)
        at += int(u[1][-1] - u[0][0]) + 1
    axis = (np.concatenate(starts), np.concatenate(ends)) if starts else (np.zeros(0, np.int64),) * 2

    def place(t: np.ndarray) -> np.ndarray:  # each row's time on the common axis, inside its rank's block
        return base[inv] + np.maximum(np.minimum(t, last[inv]), first[inv]) - first[inv]

    ga, gb = np.split(iv.covered_upto(axis, np.concatenate((place(a), place(b)))), 2)  # one running sum for both
    out = np.where(waits, np.maximum(gb - ga, 0), 0)
    w = np.flatnonzero(waits & (gb > ga))
    if not len(w):
        return out, {}
    o = w[np.argsort(ga[w], kind="stable")]  # the union of each rank's waits: blocks apart, one sweep
    lo, hi = ga[o], gb[o]
    reach = np.maximum.accumulate(hi)
    prev = np.concatenate(([np.iinfo(np.int64).min], reach[:-1]))
    part = np.maximum(hi - np.maximum(lo, prev), 0)
    per = np.bincount(inv[o], part, len(ids))
    return out, {int(r): int(v) for r, v in zip(ids.tolist(), per.tolist()) if v > 0}
