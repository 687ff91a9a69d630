"""Which rows of different ranks are the same collective, on captures that start and end at different places.

Matching by ordinal alone (the n-th all_reduce of a group on every rank) pairs different collectives as soon as
one rank's capture starts a collective later: every pair after it is shifted, and a rank looks hundreds of ms
late at every collective. What identifies a collective, in order of preference:
1. the group's sequence number (Kineto's `Seq`), where every row of the group carries a distinct one;
2. its completion time: a collective ends at about the same instant on every rank of its group (on a common
   clock: hosts are shifted first, `coarse_host_shift`). Per (group, kind), each rank's rows are aligned to a
   reference rank's (the one with the most rows) by one ordinal offset: the median over its rows of
   (index of the reference row ending nearest − own ordinal). One offset per rank keeps the pairs in order and
   survives back-to-back collectives whose ends are closer than the clock noise;
   A row ending further than a quarter of the reference's median spacing (at most FIT_MAX_NS) from its
   matched reference row, or a second row of its rank on one collective, is left unmatched;
3. order, where none of a rank's completion times agrees with the reference's (its clock or its group
   differs): the rank keeps its ordinals and is named in `by_order`.
Everything is a few sorts and searchsorted calls over all rows: linear in ranks × collectives.
"""

from __future__ import annotations

import math

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.model.stats import median
from llmdiag.diagnose.model.matching import CaptureWindow
from llmdiag.diagnose.metrics.rank.sets import median as np_median  # np.median without its numpy.ma import

FIT_MAX_NS = 5_000_000  # a completion-time fit worse than 5 ms is no fit: the clocks or the groups disagree
WINDOW = 5  # rows whose nearest-completion offsets are pooled (median) for each row's offset
LONE = -(2**40)  # match numbers below it: rows no other rank is matched to
MAX_SHIFT_OFFSET = 16  # ordinal offsets tried when estimating a host's clock shift


@dataclass
class Match:
    """Per row: the index of its collective within its (group, kind); per rank: what its capture lacks."""

    idx: np.ndarray
    by_order: list[tuple[int, int]] = field(default_factory=list)  # (rank, key id) matched by order only


def _segments(*cols: np.ndarray) -> np.ndarray:
    """First row of each run of equal values over the (already sorted) columns."""
    n = len(cols[0])
    new = np.zeros(n, bool)
    new[:1] = True
    for c in cols:
        new[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(new)


def match_rows(rank: np.ndarray, key: np.ndarray, ordinal: np.ndarray, end: np.ndarray, seq: np.ndarray,
               nkeys: int) -> Match:
    """Collective index per row (rows of any order; ordinal = n-th of its key on its rank, in start order)."""
    n = len(key)
    if not n:
        return Match(np.zeros(0, np.int64))
    numbered = np.ones(nkeys, bool)
    np.logical_and.at(numbered, key, seq >= 0)
    o = np.lexsort((seq, rank, key))  # a number seen twice on one rank (coalesced kernels): not an identity
    dup = (key[o][1:] == key[o][:-1]) & (rank[o][1:] == rank[o][:-1]) & (seq[o][1:] == seq[o][:-1])
    numbered[key[o][1:][dup]] = False
    idx = ordinal.astype(np.int64).copy()
    by_seq = numbered[key]
    idx[by_seq] = seq[by_seq]
    rest = np.flatnonzero(~by_seq)
    if not len(rest):
        return Match(idx)
    by_order = _by_completion(rank[rest], key[rest], ordinal[rest].astype(np.int64), end[rest], idx, rest)
    return Match(idx, by_order)


def _by_completion(rank, key, ordinal, end, idx_out, rows) -> list[tuple[int, int]]:
    o = np.lexsort((ordinal, rank, key))
    rank, key, ordinal, end, rows = rank[o], key[o], ordinal[o], end[o], rows[o]
    seg = _segments(key, rank)  # one (key, rank) per segment
    count = np.diff(np.append(seg, len(key)))
    seg_key = key[seg]
    kfirst = _segments(seg_key)  # segments of each key
    best = np.maximum.reduceat(count, kfirst)
    is_best = count == np.repeat(best, np.diff(np.append(kfirst, len(seg))))
    # the reference of each key: its first segment (lowest rank) with the most rows
    cand = np.where(is_best, np.arange(len(seg)), len(seg))
    ref_seg = np.minimum.reduceat(cand, kfirst)
    ref_rows = np.concatenate([np.arange(seg[s], seg[s] + count[s]) for s in ref_seg.tolist()])
    ref_key = key[ref_rows]
    ref_end = end[ref_rows]
    ref_ord = ordinal[ref_rows]
    lo = min(int(end.min()), 0)
    span = int(end.max()) - lo + 1
    if span >= 2**62 // max(int(key.max()) + 1, 1):  # composite key*span+end would overflow: keep order
        idx_out[rows] = ordinal
        return []
    ro = np.lexsort((ref_end, ref_key))
    ref_c = ref_key[ro] * span + (ref_end[ro] - lo)
    ref_ord, ref_key_s, ref_end_s = ref_ord[ro], ref_key[ro], ref_end[ro]
    row_c = key * span + (end - lo)
    p = np.searchsorted(ref_c, row_c)
    a, b = np.clip(p - 1, 0, len(ref_c) - 1), np.clip(p, 0, len(ref_c) - 1)
    da = np.where(ref_key_s[a] == key, np.abs(ref_c[a] - row_c), np.iinfo(np.int64).max)
    db = np.where(ref_key_s[b] == key, np.abs(ref_c[b] - row_c), np.iinfo(np.int64).max)
    near = np.where(db < da, b, a)
    d = ref_ord[near] - ordinal
    # per row: the median offset over a window of its rank's neighbouring rows of the key (a late start shifts
    # every offset; a collective one rank alone recorded shifts those after it; a stray nearest match does not)
    seg_id = np.repeat(np.arange(len(seg)), count)
    at = np.arange(len(d))[:, None] + np.arange(-(WINDOW // 2), WINDOW // 2 + 1)[None, :]
    at = np.clip(at, seg[seg_id][:, None], (seg + count - 1)[seg_id][:, None])
    idx = ordinal + np.sort(d[at], axis=1)[:, WINDOW // 2]
    # each row's error: |end − the reference's end at its matched index| (−1: no such reference row)
    kstart = np.searchsorted(ref_key_s, np.arange(int(key.max()) + 1))  # first reference row of each key
    kn = np.bincount(ref_key_s, minlength=int(key.max()) + 1)
    oo = np.lexsort((ref_ord, ref_key_s))  # reference rows in ordinal order per key (ordinals 0..n-1)
    ends_by_ord = ref_end_s[oo]
    first_ord = ref_ord[oo][kstart[key].clip(0, len(oo) - 1)]

    def error(rows: np.ndarray, at: np.ndarray) -> np.ndarray:  # |end − the reference's end at index `at`|, −1
        pos = at - first_ord[rows]  # where the reference has no such collective
        k = key[rows]
        inside = (pos >= 0) & (pos < kn[k])
        return np.where(inside, np.abs(end[rows] - ends_by_ord[np.clip(kstart[k] + pos, 0, len(oo) - 1)]), -1)

    err = error(np.arange(len(idx)), idx)
    gaps = np.diff(ends_by_ord)
    same = ref_key_s[oo][1:] == ref_key_s[oo][:-1]
    spacing = np.full(len(kn), np.inf)
    if same.any():
        gk, gv = ref_key_s[oo][1:][same], gaps[same]
        go = np.lexsort((gv, gk))
        gs = _segments(gk[go])
        gc = np.diff(np.append(gs, len(go)))
        spacing[gk[go][gs]] = gv[go][gs + (gc - 1) // 2]
    limit = np.minimum(0.25 * spacing[key], FIT_MAX_NS)
    # a row with no reference collective ending near it, or the second row of its rank on one collective:
    # recorded by this rank alone as far as anyone can tell; a number of its own keeps it out of every match
    lone = (err < 0) | (err > limit)
    def error1(row: int, at: int) -> int:  # `error` of one row, in plain Python (the tie loop calls it per tie)
        if not lists:
            lists.extend((end.tolist(), key.tolist(), first_ord.tolist(), kn.tolist(), kstart.tolist(),
                          ends_by_ord.tolist()))
        e_l, k_l, f_l, n_l, s_l, o_l = lists
        k = k_l[row]
        pos = at - f_l[row]
        return abs(e_l[row] - o_l[min(max(s_l[k] + pos, 0), len(o_l) - 1)]) if 0 <= pos < n_l[k] else -1

    lists: list = []
    idx, err, lone = _untie(idx, err, lone, seg_id, error1, limit)
    dup_o = np.lexsort((np.where(lone, np.iinfo(np.int64).max, err), idx, seg_id))
    same_idx = (seg_id[dup_o][1:] == seg_id[dup_o][:-1]) & (idx[dup_o][1:] == idx[dup_o][:-1])
    lone[dup_o[1:][same_idx]] = True
    lone[ref_rows] = False
    # the fit: a rank none of whose rows completes with a reference row has completion times that say nothing
    # (its clock or its group differs): it is matched by order. One that completes with some is on the common
    # clock, and its other rows are collectives the reference did not record (a sampled or cut capture)
    bad = np.bincount(seg_id[~lone], minlength=len(seg)) == 0
    bad[ref_seg] = False  # the reference matches itself
    lone &= ~bad[seg_id]
    idx = np.where(bad[seg_id], ordinal, idx)
    idx = np.where(lone, LONE - np.arange(len(idx)), idx)
    idx_out[rows] = idx
    return [(int(rank[seg[s]]), int(seg_key[s])) for s in np.flatnonzero(bad & (count > 0)).tolist()]


def _untie(idx, err, lone, seg_id, error1, limit):
    """Two consecutive rows of one rank matched to one collective (two of a key ending within microseconds at
    a capture's edge, the earlier row's nearest completion being the next one): rows run in order, so either
    the earlier moves to the collective before it or the later to the one after it, where the rank has no row
    on that one and its completion fits; or neither moves and the farther of the two is left out, as before.
    Of these the cheapest wins, a row left out costing the limit (the worst fit a match may have): a move
    whose two fits together are worse than one fit plus a row left out is not taken. Rank 0 ending at 2, 4 µs
    against a reference ending at 4, 6, 14, 22 µs (limit 2 µs) is one match (4 µs: 0 + 2), not two each 2 µs
    off (4); rank 2 of a TorchRec job ending at 3.10, 3.12 ms against 3.00, 3.10 ms (limit 1.5 ms) is two
    matches (0.10 + 0.02), not one exact one and its next all_to_all left out (1.5). On equal costs: the earlier
    moves, or else the later. In order, as each
    tie sees the ones before it resolved, but in plain Python over lists: collectives with equal completion
    times make a tie of every other row (640,000 rows took 20 s with numpy calls per tie; now linear)."""
    n = len(idx)
    tie = np.flatnonzero((seg_id[1:] == seg_id[:-1]) & (idx[1:] == idx[:-1]) & ~lone[1:] & ~lone[:-1])
    if not len(tie):
        return idx, err, lone
    ix, er, sg, lim = idx.tolist(), err.tolist(), seg_id.tolist(), limit.tolist()
    for a in tie.tolist():
        b = a + 1
        if ix[a] != ix[b]:
            continue
        best = min(er[a], er[b]) + lim[a]  # neither moves: the nearer keeps it, the farther is left out
        pick = None
        for row, at, nb, other in ((a, ix[a] - 1, a - 1, b), (b, ix[b] + 1, b + 1, a)):
            free = nb < 0 or nb >= n or sg[nb] != sg[row] or ix[nb] != at
            e = error1(row, at) if free else -1
            if 0 <= e <= lim[row] and e + er[other] < best:
                best, pick = e + er[other], (row, at, e)
        if pick is not None:
            row, at, e = pick
            ix[row], er[row] = at, e
    return np.array(ix, idx.dtype), np.array(er, err.dtype), lone.copy()


def coarse_host_shift(rank: np.ndarray, key: np.ndarray, ordinal: np.ndarray, end: np.ndarray,
                      hosts: dict[int, str]) -> dict[str, int]:
    """ns to add to each host's clock so collectives complete together, before anything is matched: per host,
    one of its ranks against one rank of the first host on the (group, kind) they share with the most rows,
    trying ordinal offsets up to MAX_SHIFT_OFFSET either way (a capture that starts late) and keeping the one
    under which most completion differences agree (within a quarter of the spacing), clocks that already agree
    first (a periodic job's collectives also line up one step off); with none, by order. Fewer than two agreeing under any offset identify nothing: clocks that already agree stay. A refinement over all matched
    collectives follows the matching (align_hosts)."""
    host_list = sorted(set(hosts.values()))
    out = {h: 0 for h in host_list}
    if len(host_list) < 2 or not len(key):
        return out
    o = np.lexsort((ordinal, rank, key))
    rank, key, end = rank[o], key[o], end[o]
    seg = _segments(key, rank)
    count = np.diff(np.append(seg, len(key)))
    by: dict[str, dict[int, tuple[int, int]]] = {}  # host -> key -> (first row, rows) of its rank with the most
    for s, c, r, k in zip(seg.tolist(), count.tolist(), rank[seg].tolist(), key[seg].tolist()):
        mine = by.setdefault(hosts.get(r, ""), {})
        if k not in mine or c > mine[k][1]:
            mine[k] = (s, c)
    ref = by.get(host_list[0], {})
    for h in host_list[1:]:
        other = by.get(h, {})
        shared = [k for k in other if k in ref]
        if not shared:
            continue
        k = max(shared, key=lambda k: (min(ref[k][1], other[k][1]), -k))
        (sa, na), (sb, nb) = ref[k], other[k]
        ea, eb = end[sa:sa + na], end[sb:sb + nb]
        spacing = float(np_median(np.diff(ea))) if na > 1 else np.inf
        tol = min(0.25 * spacing, FIT_MAX_NS)  # two completions of one collective: within this (as the matcher)
        cands = []  # (pairs that agree, pairs, shift, median deviation) per ordinal offset
        for d in [0] + [x for k in range(1, MAX_SHIFT_OFFSET + 1) for x in (k, -k)]:
            if d > na - 1 or -d > nb - 1:
                continue
            a0, b0 = max(d, 0), max(-d, 0)
            m = min(na - a0, nb - b0)
            diff = ea[a0:a0 + m] - eb[b0:b0 + m]
            med = int(np_median(diff))
            dev = np.abs(diff - med)
            cands.append((int((dev <= tol).sum()), m, med, float(np_median(dev))))
            if abs(med) <= tol and cands[-1][0] == min(na, nb):  # the clocks agree on every completion: done
                break
        # An offset is consistent where (nearly) all its pairs agree. Of those, clocks that already agree (a shift
        # within a quarter of the spacing) win: a periodic job's collectives also line up one step off, and
        # synchronised hosts are the common case; then the most pairs, the smaller shift on a tie.
        full = [c for c in cands if c[0] >= max(1, math.ceil(0.9 * c[1]))]
        agree = [c for c in full if abs(c[2]) <= tol]
        pick = (max(agree, key=lambda c: (c[0], -abs(c[2]))) if agree else
                min((c for c in full if c[0] >= 2), key=lambda c: (-c[0], abs(c[2]), c[3]), default=None))
        out[h] = pick[2] if pick else int(np_median(ea[:min(na, nb)] - eb[:min(na, nb)]))  # nothing: by order
    return out


def capture_windows(rank: np.ndarray, key: np.ndarray, idx: np.ndarray, end: np.ndarray,
                    order: np.ndarray | None = None, start: np.ndarray | None = None) -> list[CaptureWindow]:
    """Ranks whose capture starts after (or ends before) collectives the other ranks of the same (group, kind)
    recorded: how many such collectives, summed over its (group, kind)s, and how long before its first
    (after its last) collective the earliest (latest) one of any rank ended. `end` on the common clock.

    Rows are every rank's, matched or not (idx <= LONE: no other rank's completion matched it). `order`: each
    row's place among its rank's rows of its (group, kind), in start order. A rank's lead counts only where its
    first row of the key is a matched one (its last, for the trail): a rank that recorded collectives there
    which found no partner did not start capturing late, its rows were not paired (completions that drift on
    an oversubscribed CPU run, issue 36: every rank of a tp4pp2 run captured the same steps), and "its capture
    starts N collectives after the others'" would be false. Without `order` every row is taken as matched.
    `start` (same clock): a collective counts in a rank's lead only if it completed somewhere before the rank's
    first row of the key started (in its trail, after its last ended): a rank that was already running
    collectives of that group when one completed was capturing it."""
    if order is None:
        order = np.zeros(len(key), np.int64)
    if start is None:
        start = end
    if not len(key):
        return []
    # per (key, rank), over its rows matched or not (the lone rows are dropped below): rows, first start, last end
    ao = np.lexsort((rank, key))
    aseg = _segments(key[ao], rank[ao])
    first_start = np.minimum.reduceat(start[ao], aseg)
    last_end = np.maximum.reduceat(end[ao], aseg)
    n_rows = np.diff(np.append(aseg, len(ao)))
    r0, width = int(rank.min()), int(rank.max()) - int(rank.min()) + 1
    at_seg = key[ao][aseg].astype(np.int64) * width + (rank[ao][aseg] - r0)  # ascending: (key, rank) sorted
    keep = idx > LONE
    rank, key, idx, end, order = rank[keep], key[keep], idx[keep], end[keep], order[keep]
    if not len(key):
        return []
    o = np.lexsort((idx, rank, key))
    r, k, i, e, od = rank[o], key[o], idx[o], end[o], order[o]
    seg = _segments(k, r)
    last = np.append(seg[1:], len(k)) - 1
    # distinct (key, idx) in order: a rank's lead is the number of them before its first, within its key
    d = np.lexsort((i, k))
    dk, di = k[d], i[d]
    du = _segments(dk, di)
    uk, ui = dk[du], di[du]
    span = int(ui.max()) - int(ui.min()) + 2
    comp = uk * span + (ui - int(ui.min()))
    kfirst = np.searchsorted(uk, k[seg])
    klast = np.searchsorted(uk, k[seg], side="right")
    lead = np.searchsorted(comp, k[seg] * span + (i[seg] - int(ui.min()))) - kfirst
    trail = klast - 1 - np.searchsorted(comp, k[last] * span + (i[last] - int(ui.min())))
    first_od = np.minimum.reduceat(od, seg)
    last_od = np.maximum.reduceat(od, seg)
    pos = np.searchsorted(at_seg, k[seg].astype(np.int64) * width + (r[seg] - r0))  # each (key, rank)'s own rows
    own = np.stack([n_rows[pos], first_start[pos], last_end[pos]], axis=1)
    lead = np.where(first_od > 0, 0, lead)  # unmatched rows before its first matched one: not a capture edge
    trail = np.where(last_od < own[:, 0] - 1, 0, trail)
    if (lead > 0).any() or (trail > 0).any():
        c_lo = np.minimum.reduceat(e[d], du)  # per distinct collective: its earliest and latest completion
        c_hi = np.maximum.reduceat(e[d], du)
        for j in np.flatnonzero((lead > 0) | (trail > 0)).tolist():  # few: capture edges
            a, b = int(kfirst[j]), int(klast[j])
            lead[j] = int((c_lo[a:a + lead[j]] < own[j, 1]).sum())
            trail[j] = int((c_hi[b - trail[j]:b] > own[j, 2]).sum())
    ranks, ri = np.unique(r[seg], return_inverse=True)
    lead_n = np.bincount(ri, lead, len(ranks))
    trail_n = np.bincount(ri, trail, len(ranks))
    first_end = np.full(len(ranks), np.iinfo(np.int64).max)
    last_end = np.full(len(ranks), np.iinfo(np.int64).min)
    ro = np.searchsorted(ranks, r)
    np.minimum.at(first_end, ro, e)
    np.maximum.at(last_end, ro, e)
    lo, hi = int(e.min()), int(e.max())
    out = []
    for j in np.flatnonzero((lead_n > 0) | (trail_n > 0)).tolist():
        out.append(CaptureWindow(int(ranks[j]), int(lead_n[j]), (int(first_end[j]) - lo) / 1e6 if lead_n[j] else 0.0,
                                 int(trail_n[j]), (hi - int(last_end[j])) / 1e6 if trail_n[j] else 0.0))
    return out


def by_rank(rank: np.ndarray, fn) -> np.ndarray:
    """fn(rank) per row, asked once per distinct rank (16k ranks × 100 collectives: 16k calls, not 1.6M)."""
    ids, inv = np.unique(rank, return_inverse=True)
    return np.array([fn(int(r)) for r in ids.tolist()], np.int64)[inv] if len(ids) else np.zeros(0, np.int64)


def align_hosts(rank: np.ndarray, group: np.ndarray, end: np.ndarray, hosts: dict[int, str]) -> dict[str, float]:
    """Clock shift (ns) per host so matched collectives complete together; the first host is the reference.

    Per matched collective, the median completion on the reference host minus the median on host h; the
    host's shift is the median of those differences.
    """
    host_list = sorted(set(hosts.values()))
    if len(host_list) < 2:
        return {h: 0.0 for h in host_list}
    hid = {h: i for i, h in enumerate(host_list)}
    host = by_rank(rank, lambda r: hid.get(hosts.get(r, ""), -1))
    known = host >= 0
    g, hh, e = group[known], host[known], end[known]
    o = np.lexsort((e, hh, g))  # segments of (collective, host), completions sorted within each
    g, hh, e = g[o], hh[o], e[o]
    new = np.ones(len(g), bool)
    new[1:] = (g[1:] != g[:-1]) | (hh[1:] != hh[:-1])
    first = np.flatnonzero(new)
    n = np.diff(np.append(first, len(g)))
    med2 = e[first + (n - 1) // 2] + e[first + n // 2]  # twice the median per (collective, host): exact ints
    seg_g, seg_h = g[first], hh[first]
    shifts = {h: 0.0 for h in host_list}
    rg, rv = seg_g[seg_h == 0], med2[seg_h == 0]  # the reference host's collectives, in collective order
    if not len(rg):
        return shifts
    # per (collective, host h): the reference's median minus h's, then per host the median of those: one sort
    # over all segments (a scan of every segment per host was quadratic in hosts)
    pos = np.searchsorted(rg, seg_g).clip(0, len(rg) - 1)
    use = (rg[pos] == seg_g) & (seg_h > 0)
    a_v, b_v, host_of = rv[pos[use]], med2[use], seg_h[use]
    if len(a_v) and max(int(np.abs(a_v).max()), int(np.abs(b_v).max())) < 2**61:
        o = np.lexsort((a_v - b_v, host_of))
        diff, host_of = (a_v - b_v)[o].tolist(), host_of[o]
    else:  # ends near int64's edge: exact Python ints, as before
        pairs = sorted(zip(host_of.tolist(), (x - y for x, y in zip(a_v.tolist(), b_v.tolist()))))
        diff, host_of = [d for _, d in pairs], np.array([h for h, _ in pairs], np.int64)
    starts = _segments(host_of) if len(host_of) else np.zeros(0, np.int64)
    for i, a, n in zip(host_of[starts].tolist(), starts.tolist(), np.diff(np.append(starts, len(diff))).tolist()):
        med = median(diff[a + (n - 1) // 2:a + n // 2 + 1])  # the middle one or two: statistics.median's answer
        shifts[host_list[i]] = float(round(med / 2))  # whole ns: clocks are in ns
    return shifts
