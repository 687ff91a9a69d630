"""Arrival skew of matched collectives, late ranks, and the straggler decision's inputs.

Rows of different ranks are the same collective by sequence number or completion time (collective_match.py:
captures start at different collectives, so order alone pairs different ones); only collectives every rank
of their group recorded are measured. Hosts' clocks are brought together before matching (coarse) and after
it (the median difference of matched completions against the first host), before skew is measured.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.model.analysis import CollectiveSkew, SkewResult
from llmdiag.diagnose.metrics.job.straggler_replay import replay_gain_ns
from llmdiag.diagnose.metrics.job.exposed_wait import exposed_waits
from llmdiag.diagnose.metrics.job.stragglers import decide, last_and_imposed
from llmdiag.diagnose.metrics.job.collective_match import (LONE, align_hosts, by_rank, capture_windows, coarse_host_shift,
                                               match_rows)
from llmdiag.diagnose.model.matching import LateArrival
from llmdiag.diagnose.model.format import NS_PER_MS, fmt, ranges
from llmdiag.diagnose.metrics.rank.collectives import Collectives


@dataclass
class _Table:
    """Every rank's collectives in one set of columns, sorted so each matched collective is one segment."""

    keys: list[tuple[str, str]]
    rank: np.ndarray
    key: np.ndarray
    ordinal: np.ndarray
    in_n: np.ndarray
    out_n: np.ndarray
    start: np.ndarray
    end: np.ndarray
    seg: np.ndarray  # first row of each matched collective (seen on >= 2 ranks)
    size: np.ndarray  # its rows
    group: np.ndarray  # per row: its matched collective's number
    partial: int = 0  # collectives some ranks of their group did not record (capture edges): left out
    windows: list = field(default_factory=list)  # CaptureWindow per rank whose capture starts late / ends early
    by_order: list = field(default_factory=list)  # (rank, key id) whose completion times did not fit: by order


def _table(records: dict[int, Collectives], hosts: dict[int, str] | None = None,
           matched: dict[int, np.ndarray] | None = None) -> _Table:
    """Every rank's rows, matched (diagnose.metrics.collective_match), in segments of one collective each. Only
    collectives every rank of their (group, kind) recorded are kept: one a late-starting capture lacks is left
    out (counted in `partial` and named in `windows`), not paired with the next one. `matched`, when given,
    gets per rank each of its rows' collective number within its (group, kind) (LONE and below: unmatched)."""
    ids: dict[tuple[str, str], int] = {}
    cols: dict[str, list] = {"rank": [], "key": [], "ordinal": [], "start": [], "end": [], "in_n": [], "out_n": [],
                             "seq": []}
    for r, c in records.items():
        remap = np.array([ids.setdefault(k, len(ids)) for k in c.keys] or [0], np.int32)
        cols["rank"].append(np.full(len(c), r, np.int64))
        cols["key"].append(remap[c.key])
        cols["ordinal"].append(c.ordinal)
        cols["start"].append(c.start)
        cols["end"].append(c.end)
        unknown = np.full(len(c), -1, np.int64)
        cols["in_n"].append(c.in_n if c.in_n is not None else unknown)
        cols["out_n"].append(c.out_n if c.out_n is not None else unknown)
        cols["seq"].append(c.seq if c.seq is not None else unknown)
    rank, key, ordinal, start, end, in_n, out_n, seq = (np.concatenate(cols[k]) if cols[k] else np.zeros(0, np.int64)
                                                        for k in cols)
    key = key.astype(np.int64)
    coarse = coarse_host_shift(rank, key, ordinal, end, hosts or {})
    if any(coarse.values()):  # completion times compared on a common clock
        at = by_rank(rank, lambda r: coarse.get((hosts or {}).get(r, ""), 0))
        m = match_rows(rank, key, ordinal, end + at, seq, len(ids))
    else:
        m = match_rows(rank, key, ordinal, end, seq, len(ids))
    if matched is not None:  # rows are in records' order: each rank's slice is its own rows
        matched.update(zip(records, np.split(m.idx, np.cumsum([len(c) for c in records.values()])[:-1])))
    placed = ordinal  # each row's place among its rank's rows of its key, in start order
    ordinal = m.idx
    o = np.lexsort((rank, ordinal, key))
    rank, key, ordinal, start, end, in_n, out_n = (x[o] for x in (rank, key, ordinal, start, end, in_n, out_n))
    aligned = end + (at[o] if any(coarse.values()) else 0)
    # rows no other rank's completion matched are not where a capture starts or ends (capture_windows)
    windows = capture_windows(rank, key, ordinal, aligned, placed[o],
                              start + (at[o] if any(coarse.values()) else 0))
    new = np.ones(len(key), bool)
    new[1:] = (key[1:] != key[:-1]) | (ordinal[1:] != ordinal[:-1])
    first = np.flatnonzero(new)
    size = np.diff(np.append(first, len(key)))
    full = np.zeros(len(ids) or 1, np.int64)
    if len(first):
        np.maximum.at(full, key[first], size)
    whole = (size >= 2) & (size == full[key[first]]) if len(first) else np.zeros(0, bool)
    partial = int(((size >= 1) & ~whole & (full[key[first]] >= 2) & (ordinal[first] > LONE)).sum()) if len(first) else 0
    keep = np.repeat(whole, size)
    rank, key, ordinal, start, end, in_n, out_n = (x[keep] for x in (rank, key, ordinal, start, end, in_n, out_n))
    size = size[whole]
    seg = np.concatenate(([0], np.cumsum(size)[:-1])).astype(np.int64) if len(size) else np.zeros(0, np.int64)
    return _Table(list(ids), rank, key, ordinal, in_n, out_n, start, end, seg, size,
                  np.repeat(np.arange(len(size)), size), partial, windows, m.by_order)


def arrival_waits(records: dict[int, Collectives]) -> dict[int, list[tuple[int, int, tuple[str, str]]]]:
    """Per rank, at every collective matched on >= 2 ranks (the matching skew() uses: sequence numbers where
    complete, else ordinals): (its own start, the last rank's start, (process group, kind)) where it waited."""
    t = _table(records)
    out: dict[int, list] = {}
    for s, n in zip(t.seg.tolist(), t.size.tolist()):
        starts = t.start[s:s + n]
        last = int(starts.max())
        key = t.keys[int(t.key[s])]
        for r, st in zip(t.rank[s:s + n].tolist(), starts.tolist()):
            if st < last:
                out.setdefault(r, []).append((st, last, key))
    return out


def skew(records: dict[int, Collectives], hosts: dict[int, str], compute_ms: dict[int, float],
         stage_of: dict[int, int] | None = None, *, nsteps: float = 0.0,
         step_ms: float | None = None, matched: dict[int, np.ndarray] | None = None) -> SkewResult | None:
    """Collectives matched by what identifies them (collective_match.py); skew = latest start - earliest start.

    `stage_of` (rank -> pipeline stage): a collective whose ranks sit on different stages is reached in the
    order the schedule sets (stage 0 finishes 1F1B's backward last), so its last arrival is nobody's fault.
    `nsteps` / `step_ms` (median over ranks) put the imposed waits per step for the straggler decision.
    `compute_ms` is no longer read: compute-excess stragglers are decided in assembly, where stages and MoE
    expert compute are known (stragglers.compute_stragglers). `matched`: as _table's.
    """
    t = _table(records, hosts, matched)
    shifts = align_hosts(t.rank, t.group, t.end, hosts)
    if any(shifts.values()):
        per_rank = by_rank(t.rank, lambda r: int(shifts.get(hosts.get(r, ""), 0.0)))
        t.start = t.start + per_rank
        t.end = t.end + per_rank
    free = _free(records, hosts, shifts)
    matched = len(t.seg)
    last = Counter()
    by_collective = []
    ordered = _across_stages(t, stage_of or {})
    stragglers, imposed_by = [], {}
    if matched:
        hi = np.maximum.reduceat(t.start, t.seg)
        sk = hi - np.minimum.reduceat(t.start, t.seg)
        transfer = np.minimum.reduceat(t.end - t.start, t.seg)
        is_last, imposed = last_and_imposed(t.start, t.seg, t.size, t.group, ~ordered)
        rows = np.flatnonzero(is_last)
        last = Counter(dict(zip(*np.unique(t.rank[rows], return_counts=True))))
        key = t.key[t.seg]
        n = np.bincount(key, minlength=len(t.keys))
        sum_sk = np.bincount(key, sk, len(t.keys))
        max_sk = np.zeros(len(t.keys), np.int64)
        np.maximum.at(max_sk, key, sk)
        sum_tr = np.bincount(key, transfer, len(t.keys))
        present = [k for k in range(len(t.keys)) if n[k]]
        present.sort(key=lambda k: (-sum_sk[k] / n[k], t.keys[k]))
        last_by_key: dict[int, Counter] = {}
        for kk, r in zip(t.key[rows].tolist(), t.rank[rows].tolist()):  # one pass: linear in matched collectives
            last_by_key.setdefault(kk, Counter())[r] += 1
        by_collective = [CollectiveSkew(pg=group_label(t.keys[k][0]), kind=t.keys[k][1], matched=int(n[k]),
                                        mean_skew_ms=float(sum_sk[k] / n[k]) / NS_PER_MS,
                                        max_skew_ms=float(max_sk[k]) / NS_PER_MS,
                                        mean_transfer_ms=float(sum_tr[k] / n[k]) / NS_PER_MS,
                                        last_arrivals={str(r): c for r, c in sorted(last_by_key.get(k, Counter()).items())})
                        for k in present]
        ids, ri = np.unique(t.rank[rows], return_inverse=True)
        imposed_by = {str(int(r)): float(v) / NS_PER_MS
                      for r, v in zip(ids.tolist(), np.bincount(ri, imposed[rows], len(ids)).tolist()) if v > 0}
        stragglers, _ = decide(t.keys, t.rank, t.key, is_last, imposed, t.seg, t.size, ~ordered, nsteps, step_ms,
                               group_label, sk)
        for x in stragglers:
            g = replay_gain_ns(t.rank, t.start, t.end, t.seg, t.size, t.group, x.rank)
            if g is not None and nsteps:
                x.gain_ms, x.gain_kind = max(g, 0.0) / NS_PER_MS / nsteps, "simulated"
            else:
                x.gain_ms, x.gain_kind = x.imposed_ms, "bound"
            x.reason += f"; at its peers' speed the step gains {fmt(x.gain_ms, 'ms')} ({x.gain_kind})"
    if not matched and not stragglers:
        return None
    late, late_by, wait_by, late_n = _late(t, ordered) if matched else ([], {}, {}, {})
    return SkewResult(
        matched=matched,
        by_collective=by_collective,
        last_arrivals={str(int(r)): int(c) for r, c in sorted(last.items(), key=lambda rc: (-rc[1], rc[0]))},
        host_shift_ms={h: s / NS_PER_MS for h, s in shifts.items()},
        stragglers=stragglers,
        late=late,
        late_ms_by_rank=late_by,
        late_n_by_rank=late_n,
        imposed_ms_by_rank=imposed_by,
        wait_ms_by_rank=wait_by,
        wait_exposed_ms_by_rank=_exposed_by_rank(t, free) if matched else {},
        schedule_ordered=int(ordered.sum()) if matched else 0,
        size_mismatches=_size_mismatches(t) if matched else 0,
        capture_windows=t.windows,
        partial=t.partial,
        by_order=len(t.by_order),
        decided=True,
    )


def _free(records: dict[int, Collectives], hosts: dict[int, str], shifts: dict[str, float]) -> dict:
    """Each rank's exposed-communication union (Collectives.free_lo/free_hi) on the aligned clock; None where the
    rank's records carry none."""
    def sh(r: int) -> int:
        return int(shifts.get(hosts.get(r, ""), 0.0))

    return {r: None if c.free_lo is None or c.free_hi is None else (c.free_lo + sh(r), c.free_hi + sh(r))
            for r, c in records.items()}


def _exposed_by_rank(t: _Table, free: dict) -> dict[str, float]:
    """rank -> ms of its waits for later peers (its kernel begin to the last peer's, cut at its own kernel end)
    with no compute under it, summed over the analysed trace (metrics/job/exposed_wait.py)."""
    last = np.maximum.reduceat(t.start, t.seg)[t.group]
    _, per = exposed_waits(free, t.rank, t.start, np.minimum(last, t.end))
    return {str(r): ns / NS_PER_MS for r, ns in sorted(per.items())}


def _across_stages(t: _Table, stage_of: dict[int, int]) -> np.ndarray:
    """Per matched collective: do its ranks sit on two or more pipeline stages?"""
    if not stage_of or not len(t.seg):
        return np.zeros(len(t.seg), bool)
    st = by_rank(t.rank, lambda r: stage_of.get(r, -1))
    hi = np.maximum.reduceat(st, t.seg)
    lo = np.minimum.reduceat(np.where(st < 0, np.iinfo(np.int64).max, st), t.seg)
    return (hi >= 0) & (hi > lo)


_LIST = re.compile(r"\[(\d+(?:,\s*\d+)*)(,\s*\.\.\.)?\]$")  # Kineto cuts lists over 30 ranks with ", ..."


def group_label(pg: str) -> str:
    """A matched group's name as outputs print it: the trace's rank list ('mesh_dp[0, 8, 16, …]', 2,048 numbers
    in a 16k-rank job) written as ranges ('mesh_dp[0-16376 step 8]'); matching keys keep the full text."""
    m = _LIST.search(pg)
    if not m:
        return pg
    cut = ", …" if m.group(2) else ""
    return f"{pg[:m.start()]}[{ranges(sorted(int(x) for x in m.group(1).split(',')))}{cut}]"


SAME_SIZE = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter")


def _size_mismatches(t: _Table) -> int:
    """Matched collectives whose ranks disagree on the message (where the trace says): an all-reduce with
    different element counts, or an all_to_all whose elements sent over all ranks differ from those received.
    Matched by order, such a match most likely pairs different collectives."""
    known_in = np.where(t.in_n >= 0, t.in_n, 0)
    n_known = np.add.reduceat((t.in_n >= 0).astype(np.int64), t.seg)
    hi = np.maximum.reduceat(t.in_n, t.seg)
    lo = np.minimum.reduceat(np.where(t.in_n >= 0, t.in_n, np.iinfo(np.int64).max), t.seg)
    same = np.array([t.keys[k][1] in SAME_SIZE for k in t.key[t.seg].tolist()], bool)
    bad = same & (n_known >= 2) & (hi != lo)
    a2a = np.array([t.keys[k][1] == "alltoall" for k in t.key[t.seg].tolist()], bool)
    full = np.add.reduceat(((t.in_n >= 0) & (t.out_n >= 0)).astype(np.int64), t.seg) == t.size
    sent = np.add.reduceat(known_in, t.seg)
    got = np.add.reduceat(np.where(t.out_n >= 0, t.out_n, 0), t.seg)
    bad |= a2a & full & (sent != got)
    return int(bad.sum())


TOP_LATE = 10


def _late(t: _Table, ordered: np.ndarray) -> tuple[list[LateArrival], dict[str, float], dict[str, float],
                                                  dict[str, int]]:
    """Late ranks of each matched collective: those after the largest gap between consecutive arrivals when
    that gap is at least half the skew (three ranks 7 ms behind five are all late, not only the last); with
    no such gap (arrivals spread evenly) the last arrival alone. Per rank, summed over matched collectives:
    its lateness where late (its start − the earliest) and its own wait (latest start − its start); the wait
    a rank imposes is metrics/stragglers.last_and_imposed's. Schedule-ordered collectives name their late
    ranks but add to no rank's lateness."""
    o = np.lexsort((t.rank, t.start, t.group))  # segments keep their rows: only the order inside changes
    g, r, s = t.group[o], t.rank[o], t.start[o]
    first = s[t.seg][g]
    gap = np.zeros(len(s), np.int64)
    gap[1:] = s[1:] - s[:-1]
    gap[t.seg] = 0
    big = np.maximum.reduceat(gap, t.seg)
    spread = np.maximum.reduceat(s, t.seg) - s[t.seg]
    clear = 2 * big >= spread  # one gap holds most of the spread: a late group, not a queue
    last = np.zeros(len(s), bool)
    last[np.append(t.seg[1:], len(s)) - 1] = True
    cut = np.where(clear[g], (gap == big[g]) & (big[g] > 0), last & (gap > 0)).astype(np.int64)
    c = np.cumsum(cut)
    is_late = (c - (c[t.seg] - cut[t.seg])[g]) >= 1
    lateness = s - first
    blame = is_late & ~ordered[g]
    ids, ri = np.unique(r, return_inverse=True)  # rank numbers can be large: bin by their index
    late_by = np.bincount(ri[blame], lateness[blame], len(ids))
    late_n = np.bincount(ri[blame], minlength=len(ids))
    wait_by = np.bincount(ri, np.maximum.reduceat(s, t.seg)[g] - s, len(ids))
    sk = spread
    transfer = np.minimum.reduceat(t.end - t.start, t.seg)
    out = []
    for k in np.argsort(-sk, kind="stable")[:TOP_LATE].tolist():
        if sk[k] <= 0:
            break
        rows = np.arange(t.seg[k], t.seg[k] + t.size[k])
        lr = rows[is_late[rows]]
        pos = o[rows]  # the same rows in the table's own order, for the sizes
        key = t.keys[int(t.key[t.seg[k]])]
        out.append(LateArrival(
            pg=group_label(key[0]), kind=key[1], ordinal=int(t.ordinal[t.seg[k]]), ranks=int(t.size[k]),
            skew_ms=float(sk[k]) / NS_PER_MS, transfer_ms=float(transfer[k]) / NS_PER_MS,
            late_ranks=[int(x) for x in r[lr]], late_ms=[float(x) / NS_PER_MS for x in lateness[lr]],
            schedule_ordered=bool(ordered[k]),
            in_nelems={str(int(t.rank[i])): int(t.in_n[i]) for i in pos if t.in_n[i] >= 0},
            out_nelems={str(int(t.rank[i])): int(t.out_n[i]) for i in pos if t.out_n[i] >= 0}))
    def per_rank(v):
        return {str(int(ids[i])): float(x) / NS_PER_MS for i, x in enumerate(v) if x > 0}

    return (out, per_rank(late_by), per_rank(wait_by),
            {str(int(ids[i])): int(x) for i, x in enumerate(late_n) if x > 0})
