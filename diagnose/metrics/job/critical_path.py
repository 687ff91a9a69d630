"""The job's critical path: what bounds each step of the whole job, through its collectives and send/recv.

A collective ends on every member only once its last member has arrived (its kernel began). So, walking back
from the end of a step (on the rank whose step ends last, on the common clock), the path follows the rank's own
path (metrics/rank/critical_path) back to the collective it reached last; there, the time from the last
member's arrival to the collective's end is communication, and the path continues on R, the member that
arrived last, from R's arrival along R's own work to R's previous collective on its path, and so on to the
step's start: the path tiles the job's step. The rank it left waited from its own arrival to R's; the part of
that wait during which the path runs on R's own work is "waiting on rank R" (an overlay of the five
categories, never counted twice), and the path's time on each rank is what that rank holds of it. HTA
computes one rank's path and leaves the multi-rank path as future work.

Each rank's worker exports its hops (metrics/rank/critical_path/hops.py): per collective row, its own path
back from the row's arrival to the previous collective it reached, in HTA's five categories. Here the rows are
matched by the skew's matching (metrics/job/collective_match.py: only collectives every member of the group
recorded are crossed; one some member lacks is taken as the rank's own communication), and each step's walk
visits only the collectives on its path: linear in ranks × collectives, and the rank graphs never leave the
workers. A send and its receive (paired in order per ordered pair of ranks, as metrics/job/pipeline/p2p.py
pairs them) are crossed the same way: a transfer completes once both sides have posted. Where a rank's host
waited through one of its collectives with nothing recorded, its worker's cuts (critical_path/cuts.py) say where
its own path ends, and the walk crosses that collective too. The walk gives each step's numbers (per_step) and,
for the timeline, the path's stretches (Segment): bounded by the path's changes, not by the ranks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from llmdiag.diagnose.metrics.job.collective_match import LONE

from llmdiag.diagnose.model.critical_path import (CATEGORIES, MAX_WAITED, JobCriticalPath, JobStepPath,
                                                  job_sampled_note, typical_step)

COMM = CATEGORIES.index("gpu_communication_bound")
CPU = CATEGORIES.index("cpu_bound")
WAIT = len(CATEGORIES)  # the index of "waiting on a rank" after the five categories


def sampled_job_note(outputs) -> str:
    """Why the job's path is not stated, "" where it is: some rank's capture is event-sampled
    (RankChores.sampled_share). The path leaves a rank at the collective whose last member arrived, and on a
    sampled rank that arrival, and the own path back from it, run through dropped events: a path walked there
    would put the job's bound on whichever rank the holes favour (hta/sampled_pair, 2 of 128 ranks: "held by
    rank 1", a straggler the events do not show). Not stated for the whole job even where some ranks are
    complete: any rank can be on the path, and which ones are is what cannot be told."""
    got = sorted((o.rank, o.metrics.chores.sampled_share) for o in outputs
                 if o.metrics.chores is not None and o.metrics.chores.sampled_share is not None)
    if not got or len(outputs) < 2:
        return ""
    return job_sampled_note([r for r, _ in got], len(outputs), min(x for _, x in got))


class Segment(NamedTuple):
    """A stretch of the job's path on one rank, on the common clock (ns): for the timeline's track
    (export/tracks.py), never in the summary. `label`: the HTA category holding most of it; `waited_for`: at a
    collective the path leaves this rank for, the rank that arrived last (-1: none)."""

    rank: int
    start: int
    end: int
    step: int
    label: str
    waited_for: int = -1


def job_critical_path(outputs, shift: dict[int, int], matched: dict[int, np.ndarray],
                      segments: list[Segment] | None = None) -> JobCriticalPath | None:
    """The job's path over its steps, from the ranks' outputs (RankOutput with `path_hops`), each rank's clock
    shift onto the common clock (metrics/job/clock.py), and the skew's matching (per rank, per collective row,
    its collective's number within its (group, kind); LONE and below: unmatched). None with fewer than two
    ranks that have hops, or where nothing can be crossed (no collective or send/recv matched across ranks).
    `segments`, when given, gets the path's stretches per rank (adjacent ones of one rank and label merged)."""
    if sampled_job_note(outputs):
        return None
    outs = [o for o in outputs if o.path_hops is not None and o.path_hops.rows == len(o.collectives)
            + len(o.path_hops.extra) and o.rank in shift]
    if len(outs) < 2:
        return None
    t = _Rows(outs, shift, matched)
    if not t.crossable:
        return None
    totals = np.zeros(WAIT + 1)
    waited: dict[int, float] = {}
    held: dict[int, float] = {}
    per_step: list[JobStepPath] = []
    hops = 0
    for at, t0, step in t.step_ends():
        w: dict[int, float] = {}
        h: dict[int, float] = {}
        acc, n = t.walk(at, t0, w, h, step, segments)
        totals += acc
        hops += n
        for src, dst in ((w, waited), (h, held)):
            for r, v in src.items():
                dst[r] = dst.get(r, 0.0) + v
        if (x := _shares(acc, 1)) is not None:
            per_step.append(JobStepPath(**x, step=step, waiting_on=_top(w, 1), held_by=_top(h, 1), hops=n))
    steps = len(per_step)
    out = _shares(totals, steps)
    if out is None or not steps:
        return None
    return JobCriticalPath(**out, waiting_on=_top(waited, steps), held_by=_top(held, steps), steps=steps,
                           hops=round(hops / steps, 2), per_step=per_step,
                           typical=typical_step([(s.step, s) for s in per_step], skip_first=True))


def segment_tracks(segs: list[Segment], tracks: dict, shift: dict[int, int]) -> None:
    """The path's stretches into the timeline tracks of the ranks they run on (those asked for), on each rank's own
    clock as every track is (the exporter adds the shift back)."""
    for x in segs:
        if (tr := tracks.get(x.rank)) is not None:
            sh = shift.get(x.rank, 0)
            tr.job_path.append((x.start - sh, x.end - sh, x.step, x.label, x.waited_for))


def _shares(acc: np.ndarray, steps: int) -> dict | None:
    """length_ms (per step) and the shares in percent of ns per category `acc` (the wait last); None when empty."""
    total = float(acc[:WAIT].sum())  # the path tiles the step: the waits lie within it
    if total <= 0:
        return None
    pct = [round(min(100.0 * float(v) / total, 100.0), 1) for v in acc]
    return dict(length_ms=round(total / 1e6 / steps, 3), **dict(zip(CATEGORIES, pct[:WAIT])), waiting_on_rank=pct[WAIT])


def _top(ns: dict[int, float], steps: int) -> dict[str, float]:
    """The MAX_WAITED ranks with the most ns, as ms per step, the most first."""
    top = sorted(ns.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_WAITED]
    return {str(r): round(v / 1e6 / steps, 3) for r, v in top if v > 0}


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


class _Rows:
    """Every rank's collective rows on the common clock, each pointing at its collective's last arrival."""

    def __init__(self, outs, shift: dict[int, int], matched: dict[int, np.ndarray]):
        self.outs = outs
        self.shifts = [int(shift[o.rank]) for o in outs]
        hops = [o.path_hops for o in outs]
        ncoll = np.array([len(o.collectives) for o in outs], np.int64)
        sizes = np.array([h.rows for h in hops], np.int64)  # collective rows, then send/recv rows
        nwin = np.array([len(h.step) for h in hops], np.int64)
        self.base = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        wbase = np.concatenate(([0], np.cumsum(nwin))).astype(np.int64)
        n = int(self.base[-1])
        self.rank = np.repeat(np.arange(len(outs), dtype=np.int32), sizes)  # position in outs
        shift_row = np.repeat(np.array(self.shifts, np.int64), sizes)
        ids: dict[tuple[str, str], int] = {}
        remaps, kbase, kb = [], [], 0  # each rank's (group, kind) ids onto the job's: one list per rank, few keys
        for o in outs:
            remaps.append([ids.setdefault(k, len(ids)) for k in o.collectives.keys])
            kbase.append(kb)
            kb += len(o.collectives.keys)
        remap = np.array([x for r in remaps for x in r] or [0], np.int64)
        raw = _cat([np.r_[o.collectives.key, np.full(len(h.extra), -1)] for o, h in zip(outs, hops)], np.int64)
        key = np.where(raw >= 0, remap[(np.repeat(np.array(kbase, np.int64), sizes) + raw).clip(0, len(remap) - 1)],
                       -1)
        own = [m if (m := matched.get(o.rank)) is not None and len(m) == len(o.collectives) else None for o in outs]
        idx = _cat([np.r_[m if m is not None else np.full(len(o.collectives), LONE), np.full(len(h.extra), LONE)]
                    for o, m, h in zip(outs, own, hops)], np.int64)
        unmatched = idx <= LONE
        idx[unmatched] = LONE - np.flatnonzero(unmatched)  # a number of its own: matched with nothing
        self.start = _cat([np.r_[o.collectives.start, h.extra[:, 0]] for o, h in zip(outs, hops)], np.int64) + shift_row
        self.end = _cat([np.r_[o.collectives.end, h.extra[:, 1]] for o, h in zip(outs, hops)], np.int64) + shift_row
        prev = _cat([h.prev[:h.rows] for h in hops], np.int64)
        win = _cat([h.win for h in hops], np.int64)
        wstart = _cat([h.start for h in hops], np.int64) + np.repeat(np.array(self.shifts, np.int64), nwin)
        row_base = np.repeat(self.base[:-1], sizes)
        at_win = np.repeat(wbase[:-1], sizes) + win.clip(0, None)
        # where each row's own walk ends: its prev row's end, or its window's start
        self.floor = np.where(prev >= 0, self.end[(row_base + prev).clip(0, max(n - 1, 0))] if n else prev,
                              np.where(win >= 0, wstart[at_win.clip(0, max(len(wstart) - 1, 0))] if len(wstart)
                                       else self.start, self.start))
        self.wstart, self.wend = wstart, _cat([h.end for h in hops], np.int64) + np.repeat(
            np.array(self.shifts, np.int64), nwin)
        self.wrank, self.wbase = np.repeat(np.arange(len(outs), dtype=np.int64), nwin), wbase
        self.wstep = _cat([h.step for h in hops], np.int64)
        self.last = np.full(n, -1, np.int64)  # per row: the row of its collective's last arrival (-1: not crossed)
        ok = np.flatnonzero(idx > LONE)
        self.crossable = False
        # per (rank position, hop): (row of the collective its own path waited through, the resume on the common
        # clock, ns per category above it): critical_path/cuts.py
        self.cuts: dict[tuple[int, int], tuple[int, int, np.ndarray]] = {}
        for p, (o, sh) in enumerate(zip(outs, self.shifts)):
            c = getattr(o, "path_cuts", None)
            if c is not None:
                for hop, row, at, cats in zip(c.hop.tolist(), c.row.tolist(), c.at.tolist(), c.cats):
                    if 0 <= row < sizes[p]:
                        self.cuts[(p, hop)] = (row, at + sh, cats)
        self.segs: list[Segment] | None = None  # the walk's stretches (walk() sets them per step)
        self.step = 0
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
        if ncoll.sum() < n:
            self._pair_p2p(ncoll)

    def _pair_p2p(self, ncoll: np.ndarray) -> None:
        """Send/recv rows: a transfer completes once both sides have posted, so each row's last arrival is the
        later of its partners' (a batched kernel carries several), paired as the skew pairs them (the n-th send
        a->b is the n-th receive on b from a: metrics/job/pipeline/p2p.py)."""
        from llmdiag.diagnose.metrics.job.pipeline.p2p import ordered_pairs

        ops = []
        for i, o in enumerate(self.outs):
            h = o.path_hops
            if not len(h.extra) or not o.p2p:
                continue
            first = int(self.base[i] + ncoll[i])
            at = {(a, b): first + k for k, (a, b) in enumerate(h.extra.tolist())}
            ops += [(pg, kind, o.rank, peer, g) for pg, kind, peer, a, b in o.p2p if (g := at.get((a, b))) is not None]
        sends, recvs = [], []
        for a, b in ordered_pairs(ops).values():
            n = min(len(a), len(b))
            sends += a[:n]
            recvs += b[:n]
        if not sends:
            return
        row, partner = np.array(sends + recvs, np.int64), np.array(recvs + sends, np.int64)
        o = np.lexsort((self.start[partner], row))
        latest = np.r_[row[o][1:] != row[o][:-1], True]
        r, p = row[o][latest], partner[o][latest]
        later = self.start[p] > self.start[r]
        self.last[r[later]] = p[later]
        self.crossable = self.crossable or bool(later.any())

    def step_ends(self) -> list[tuple[tuple[int, int], int, int]]:
        """Per step number, in order: ((rank position, window) of the rank whose window of the step ends last,
        the job step's start, the step number). The job's step runs from the later of its ranks' earliest start and the previous
        step's end (windows of one step do not begin together on every rank) to its last end: the steps tile."""
        if not len(self.wstep):
            return []
        rk, st, be, en = self.wrank, self.wstep, self.wstart, self.wend
        wi = np.arange(len(st)) - self.wbase[rk]
        o = np.lexsort((rk, en, st))
        first = np.r_[True, st[o][1:] != st[o][:-1]]
        last = np.r_[first[1:], True]
        lo = np.minimum.reduceat(be[o], np.flatnonzero(first))
        out, prev_end = [], None
        for (r, w, e, n), b in zip(zip(rk[o][last].tolist(), wi[o][last].tolist(), en[o][last].tolist(),
                                       st[o][last].tolist()), lo.tolist()):
            t0 = b if prev_end is None or prev_end >= e else max(b, prev_end)
            out.append(((r, w), t0, n))
            prev_end = e
        return out

    def walk(self, at: tuple[int, int], t0: int, waited: dict[int, float], held: dict[int, float], step: int = 0,
             segs: list[Segment] | None = None) -> tuple[np.ndarray, int]:
        """One step's path back from the end of window `at` to the step's start `t0`: ns per category, then the
        ns during which the rank the path came from waited on the rank it runs on (an overlay of the five), and
        the number of times it changed rank. `waited` gets those ns per rank waited on, `held` the path's ns per
        rank it ran on, `segs` (when given) its stretches. The one stretch of a rank's own path that crosses
        `t0` counts in proportion."""
        self.segs, self.step = segs, step
        i, k = at
        h = self.outs[i].path_hops
        acc = np.zeros(WAIT + 1)
        j = int(h.prev[h.rows + k])
        floor = int(self.end[self.base[i] + j]) if j >= 0 else int(h.start[k]) + self.shifts[i]
        done, j, left = self._own(i, h.rows + k, h.cats[h.rows + k], int(h.end[k]) + self.shifts[i], floor, j, t0,
                                  acc, held)
        if done:
            return acc, 0
        budget, hops = len(self.start) + 1, 0  # a loop (rows pointing at each other) is never walked forever
        while j >= 0 and budget > 0:
            budget -= 1
            g = int(self.base[i]) + j
            last = int(self.last[g])
            pending = None
            if last >= 0 and self.start[last] > self.start[g]:  # it waited for a later member
                lo = int(self.start[last])
                pending = (int(self.rank[last]), int(self.start[g]), lo)
            else:  # it arrived last (or the collective was not crossed): its own communication
                lo = int(self.start[g])
            comm = int(self.end[g]) - max(lo, t0)
            if comm > 0:
                acc[COMM] += comm
                held[self.outs[i].rank] = held.get(self.outs[i].rank, 0.0) + comm
                self._segment(i, max(lo, t0), int(self.end[g]), CATEGORIES[COMM],
                              self.outs[pending[0]].rank if pending is not None else -1)
            if lo <= t0:
                done = True
                break
            if pending is not None:
                i, j = pending[0], int(last - self.base[pending[0]])
                hops += 1
            g = int(self.base[i]) + j
            h = self.outs[i].path_hops
            done, j, left = self._own(i, j, h.cats[j], int(self.start[g]), int(self.floor[g]), int(h.prev[j]), t0, acc,
                                      held)
            if pending is not None:  # R's own work from its arrival back to where the path leaves R
                wait = pending[2] - max(pending[1], left, t0)
                if wait > 0:
                    acc[WAIT] += wait
                    r = self.outs[pending[0]].rank
                    waited[r] = waited.get(r, 0.0) + wait
            if done:
                break
        if not done and left > t0:  # the path's rank began its window after the step's start: the rest of the
            # step it spent between its windows, on its host (outside any step: nothing there is profiled as work)
            lag = np.zeros(len(CATEGORIES), np.float32)
            lag[CPU] = left - t0
            self._piece(i, lag, left, t0, t0, acc, held)
        return acc, hops

    def _own(self, i: int, hop: int, cats: np.ndarray, top: int, floor: int, prev: int, t0: int, acc: np.ndarray,
             held: dict[int, float]) -> tuple[bool, int, int]:
        """Rank i's own path back from `top` along its hop `hop` (a row, or rows + window): (whether it reached
        t0, the row where the path reaches a collective next (-1 none), the time the path leaves the rank's own
        work). Where the hop passed through a resume after a collective (metrics/rank/critical_path/cuts.py),
        the rank's own path ends there: its part above the resume, the resume's lag after the collective's end
        (host time), then that collective, crossed as any other."""
        cut = self.cuts.get((i, hop))
        if cut is None:
            return self._piece(i, cats, top, floor, t0, acc, held), prev, floor
        g, at, above = cut
        if self._piece(i, above, top, at, t0, acc, held):
            return True, g, at
        end = int(self.end[self.base[i] + g])
        lag = np.zeros(len(CATEGORIES), np.float32)
        lag[CPU] = at - end
        return self._piece(i, lag, at, end, t0, acc, held), g, end

    def _piece(self, i: int, cats: np.ndarray, top: int, floor: int, t0: int, acc: np.ndarray,
               held: dict[int, float]) -> bool:
        """Adds rank i's own path over [floor, top] (ns per category `cats`), the part after t0 only; True
        where it reached t0."""
        frac = 1.0
        if floor < t0:
            frac = min(max((top - t0) / (top - floor), 0.0), 1.0) if top > floor else 0.0
        part = cats.astype(np.float64) * frac
        acc[:WAIT] += part
        r = self.outs[i].rank
        held[r] = held.get(r, 0.0) + float(part.sum())
        if part.sum() > 0:
            self._segment(i, max(floor, t0), top, CATEGORIES[int(np.argmax(part))])
        return floor <= t0

    def _segment(self, i: int, start: int, end: int, label: str, waited_for: int = -1) -> None:
        """Records a stretch of the path (walked back: each before the last recorded), merged into the last one
        where it is the same rank and label and they touch: the track stays as long as the path's changes."""
        segs = self.segs
        if segs is None or end <= start:
            return
        r = self.outs[i].rank
        if segs and (x := segs[-1]).rank == r and x.label == label and x.step == self.step and x.start == end:
            segs[-1] = x._replace(start=start)
        else:
            segs.append(Segment(r, start, end, self.step, label, waited_for))
