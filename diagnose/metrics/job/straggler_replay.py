"""The straggler's gain, replayed: the matched collectives of all ranks as a dependency graph, once as traced
and once with the straggler's launch gaps at its peers' median; the gain is the difference in span per step.

Graph: on each rank, a collective depends on the rank's collective that ended last before it started (its
launch gap: start − that end, the rank's own work in between); a collective ends for every member at the
last member's start plus that member's own transfer (its end − the last start). A rank's first collective
waits for its gap after the window's first arrival. Replaying as traced gives the trace back; the straggler at its peers' speed takes,
at each collective, the smaller of its gap and the median gap of the other members. Collectives are replayed
in order of their traced end (a dependency ends before its dependant starts), one group at a time.
Not built above REPLAY_MAX_ROWS rows (the caller keeps the imposed wait as a bound).
"""

from __future__ import annotations

import numpy as np

REPLAY_MAX_ROWS = 2_000_000


def replay_gain_ns(rank: np.ndarray, start: np.ndarray, end: np.ndarray, seg: np.ndarray, size: np.ndarray,
                   group: np.ndarray, who: int) -> float | None:
    """Span shortened (ns, whole trace) when rank `who` launches each collective after its peers' median gap."""
    n = len(rank)
    if not n or n > REPLAY_MAX_ROWS or not (rank == who).any():
        return None
    hi = np.maximum.reduceat(start, seg)
    transfer = np.maximum(end - hi[group], 0)
    # predecessor on the same rank: the latest end at or before this row's start (one searchsorted over
    # (rank, end) composites: each rank's rows are a slice of `o`)
    ids, ro = np.unique(rank, return_inverse=True)
    o = np.lexsort((end, ro))
    cnt = np.bincount(ro, minlength=len(ids))
    comp_hi = np.cumsum(cnt)[ro]
    comp_lo = comp_hi - cnt[ro]
    base = int(min(end.min(), start.min()))
    big = int(max(end.max(), start.max())) - base + 1
    if big >= 2**62 // max(len(ids), 1):
        return None
    comp = ro[o].astype(np.int64) * big + (end[o] - base)
    pos = np.searchsorted(comp, ro.astype(np.int64) * big + (start - base), side="right") - 1
    has = (pos >= comp_lo) & (pos < comp_hi)
    pred = np.where(has, o[np.clip(pos, 0, n - 1)], -1)
    pred = np.where(pred == np.arange(n), -1, pred)
    t0 = int(start.min())  # a rank's first collective: its gap from the window's first arrival
    gap = np.where(pred >= 0, start - end[np.clip(pred, 0, n - 1)], start - t0)
    mine = rank == who
    # peers' median gap per collective (the members other than `who`)
    peer = ~mine
    go = np.lexsort((gap, ~peer, group))  # per group: the peers' gaps first, sorted
    n_peer = np.bincount(group[peer], minlength=len(seg))
    first = seg  # rows of a group are contiguous in the table; go keeps groups contiguous in the same places
    med = np.where(n_peer > 0, gap[go][first + np.maximum(n_peer - 1, 0) // 2], 0)
    fixed = np.where(mine & (n_peer[group] > 0), np.minimum(gap, med[group]), gap)
    base_span = _replay(start, gap, transfer, pred, seg, size, group, end)
    fix_span = _replay(start, fixed, transfer, pred, seg, size, group, end)
    return float(base_span - fix_span)


def _replay(start, gap, transfer, pred, seg, size, group, end) -> int:
    t0 = int(start.min())
    order = np.argsort(np.maximum.reduceat(end, seg), kind="stable")
    rep_start = start.astype(np.int64).copy()
    rep_end = end.astype(np.int64).copy()
    has = pred >= 0
    for g in order.tolist():
        s, k = int(seg[g]), int(size[g])
        sl = slice(s, s + k)
        p = pred[sl]
        st = np.where(has[sl], rep_end[np.clip(p, 0, None)], t0) + gap[sl]
        rep_start[sl] = st
        rep_end[sl] = st.max() + transfer[sl]
    return int(rep_end.max() - rep_start.min())
