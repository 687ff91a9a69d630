"""The job's critical path: what bounds each step of the whole job, through its collectives.

A collective ends on every member only once its last member has arrived (its kernel began). So, walking back
from the end of a step (on the rank whose step ends last, on the common clock), the path follows the rank's own
path (metrics/rank/critical_path) back to the collective it reached last; there, the time from the last
member's arrival to the collective's end is communication, and the time the rank spent between its own arrival
and the last one is "waiting on rank R", R being the member that arrived last. The path then continues on R,
from R's arrival, along R's own work, to R's previous collective on its path, and so on to the step's start.
HTA computes the first part (one rank's path) and leaves the multi-rank path as future work.

Each rank's worker exports its hops (metrics/rank/critical_path/hops.py): per collective row, its own path
back from the row's arrival to the previous collective it reached, in HTA's five categories. Here the rows are
matched by the skew's matching (metrics/job/collective_match.py: only collectives every member of the group
recorded are crossed; one some member lacks is taken as the rank's own communication), and each step's walk
visits only the collectives on its path: linear in ranks × collectives, and the rank graphs never leave the
workers. Point-to-point transfers are the ranks' own communication here (not crossed).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.job.collective_match import LONE
from llmdiag.diagnose.model.critical_path import CATEGORIES, MAX_WAITED, JobCriticalPath

COMM = CATEGORIES.index("gpu_communication_bound")
WAIT = len(CATEGORIES)  # the index of "waiting on a rank" after the five categories


def job_critical_path(outputs, shift: dict[int, int], matched: dict[int, np.ndarray]) -> JobCriticalPath | None:
    """The job's path over its steps, from the ranks' outputs (RankOutput with `path_hops`), each rank's clock
    shift onto the common clock (metrics/job/clock.py), and the skew's matching (per rank, per collective row,
    its collective's number within its (group, kind); LONE and below: unmatched). None with fewer than two
    ranks that have hops, or no collective matched across ranks."""
    outs = [o for o in outputs if o.path_hops is not None and o.path_hops.rows == len(o.collectives)
            and o.rank in shift]
    if len(outs) < 2:
        return None
    t = _Rows(outs, shift, matched)
    if not t.crossable:
        return None
    totals = np.zeros(WAIT + 1)
    waited: dict[int, float] = {}
    steps = hops = 0
    for w in t.last_windows():
        acc, n = t.walk(w, waited)
        totals += acc
        steps += 1
        hops += n
    total = float(totals[:WAIT].sum())  # the path tiles the step: the waits lie within it
    if total <= 0 or not steps:
        return None
    pct = [round(min(100.0 * float(v) / total, 100.0), 1) for v in totals]
    top = sorted(waited.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_WAITED]
    return JobCriticalPath(length_ms=round(total / 1e6 / steps, 3), **dict(zip(CATEGORIES, pct)),
                           waiting_on_rank=pct[WAIT],
                           waiting_on={str(r): round(ns / 1e6 / steps, 3) for r, ns in top if ns > 0},
                           steps=steps, hops=round(hops / steps, 2))


class _Rows:
    """Every rank's collective rows on the common clock, each pointing at its collective's last arrival."""

    def __init__(self, outs, shift: dict[int, int], matched: dict[int, np.ndarray]):
        self.outs = outs
        self.shifts = [int(shift[o.rank]) for o in outs]
        sizes = [len(o.collectives) for o in outs]
        self.base = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        n = int(self.base[-1])
        self.rank = np.repeat(np.arange(len(outs), dtype=np.int32), sizes)  # position in outs
        ids: dict[tuple[str, str], int] = {}
        key = np.empty(n, np.int64)
        idx = np.empty(n, np.int64)
        self.start = np.empty(n, np.int64)
        self.end = np.empty(n, np.int64)
        for i, o in enumerate(outs):
            c, a, b = o.collectives, int(self.base[i]), int(self.base[i + 1])
            remap = np.array([ids.setdefault(k, len(ids)) for k in c.keys] or [0], np.int64)
            key[a:b] = remap[c.key]
            m = matched.get(o.rank)
            idx[a:b] = m if m is not None and len(m) == b - a else LONE - np.arange(a, b)
            self.start[a:b] = c.start + shift[o.rank]
            self.end[a:b] = c.end + shift[o.rank]
        self.last = np.full(n, -1, np.int64)  # per row: the row of its collective's last arrival (-1: not crossed)
        ok = np.flatnonzero(idx > LONE)
        self.crossable = False
        if len(ok):
            o = ok[np.lexsort((self.start[ok], idx[ok], key[ok]))]
            new = np.r_[True, (key[o][1:] != key[o][:-1]) | (idx[o][1:] != idx[o][:-1])]
            first = np.flatnonzero(new)
            size = np.diff(np.append(first, len(o)))
            full = np.zeros(len(ids) or 1, np.int64)
            np.maximum.at(full, key[o][first], size)
            whole = (size >= 2) & (size == full[key[o][first]])  # every member recorded it (skew.py's rule)
            lastrow = o[first + size - 1]  # the latest start of each collective
            self.last[o] = np.repeat(np.where(whole, lastrow, -1), size)
            self.crossable = bool(whole.any())

    def last_windows(self):
        """Per step number: (rank position, window) of the rank whose window of that step ends last."""
        rk, st, en, wi = [], [], [], []
        for i, o in enumerate(self.outs):
            h = o.path_hops
            rk.append(np.full(len(h.step), i, np.int64))
            st.append(h.step)
            en.append(h.end + self.shifts[i])
            wi.append(np.arange(len(h.step)))
        rk_a, st_a, en_a, wi_a = (np.concatenate(x) for x in (rk, st, en, wi))
        if not len(rk_a):
            return []
        o = np.lexsort((rk_a, en_a, st_a))
        last = np.r_[st_a[o][1:] != st_a[o][:-1], True]
        return list(zip(rk_a[o][last].tolist(), wi_a[o][last].tolist()))

    def walk(self, at: tuple[int, int], waited: dict[int, float]) -> tuple[np.ndarray, int]:
        """One step's path back from the end of window `at`: ns per category, then the ns during which the rank
        the path came from waited on the rank it runs on (within the five: an overlay), and the number of times
        it changed rank; `waited` gets those ns per rank waited on."""
        i, k = at
        h = self.outs[i].path_hops
        acc = np.zeros(WAIT + 1)
        acc[:WAIT] += h.cats[h.rows + k]
        j, cur = int(h.prev[h.rows + k]), -1
        pending: tuple[int, int, int] | None = None  # (rank waited on, from, to): its segment's start not yet known
        budget, hops = len(self.start) + 1, 0  # a loop (rows pointing at each other) is never walked forever
        while j >= 0 and budget > 0:
            budget -= 1
            g = int(self.base[i]) + j
            self._close(pending, int(self.end[g]), acc, waited)
            pending = None
            last = int(self.last[g])
            if last >= 0 and self.start[last] > self.start[g]:  # it waited for a later member
                ri = int(self.rank[last])
                acc[COMM] += max(int(self.end[g] - self.start[last]), 0)
                pending = (self.outs[ri].rank, int(self.start[g]), int(self.start[last]))
                i, j = ri, int(last - self.base[ri])
                hops += 1
            else:  # it arrived last (or the collective was not crossed): its own communication
                acc[COMM] += int(self.end[g] - self.start[g])
            h = self.outs[i].path_hops
            acc[:WAIT] += h.cats[j]
            cur, j = j, int(h.prev[j])
        if pending is not None and cur >= 0:  # the last rank's segment runs back to its window's start
            c = self.outs[i].collectives
            w = max(int(np.searchsorted(h.start, c.start[cur], side="right")) - 1, 0)
            self._close(pending, int(h.start[w]) + self.shifts[i] if len(h.start) else pending[1], acc, waited)
        return acc, hops

    @staticmethod
    def _close(pending, seg_start: int, acc: np.ndarray, waited: dict[int, float]) -> None:
        """A wait on rank R counts only while the path runs on R's own work: from R's arrival back to where
        the path leaves R (`seg_start`), so waits never overlap and never exceed the path."""
        if pending is None:
            return
        r, a, b = pending
        wait = b - max(a, seg_start)
        if wait > 0:
            acc[WAIT] += wait
            waited[r] = waited.get(r, 0.0) + wait
