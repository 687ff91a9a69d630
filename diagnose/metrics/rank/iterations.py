"""Iterations of a capture with neither ProfilerStep nor `Optimizer.step#...` ops (issue #34).

Two readings of the host ops, tried in this order (steps.py falls back to them after the optimizer steps):

- `repeated_pattern`: the names of the top-level ops on the main thread, as a sequence, are k >= 2 repeats of
  one period (the smallest such), after at most one warm-up iteration (the first iteration of a loop often
  runs more ops: lazy initialisation, autotuning) and before at most a partial one (the capture ended
  mid-iteration). Each repeat is an iteration, from its first op's start to the next repeat's; the warm-up is
  iteration 0. Refused (silence) where the ops before the repeats are not one warm-up iteration (every op of
  an iteration, at least as often, in fewer than two periods' ops: a one-shot forward's preamble before its
  identical layers runs none of a layer's ops), where the capture's first op is not one every iteration runs
  (the capture began at an iteration's start: a one-shot forward begins with its embedding, not with a layer),
  and unless the iterations hold at least two thirds of the thread's top-level ops and of the capture's host
  time.
- `forward_backward`: training whose iterations differ in their ops (data-dependent shapes): every run of
  autograd backward ops (`autograd::engine::evaluate_function: ...`, on the autograd thread or the main one)
  after a run of forward ops on the main thread closes an iteration; each iteration runs from the start of
  its forward run to the next's. Refused unless at least two iterations hold similar numbers of ops (within
  2x of their median: a pipeline's or an accumulation loop's microbatches would not be iterations).

Linear in events after the one sort top_level makes; the period search verifies a bounded number of
candidate periods (the gaps between repeats of the sequence's rarest ops, up to their 8th next occurrence),
each in one vectorised pass. A period in which every op runs more than 8 times is not found.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank.classify import HOST_CATS_OP, gloo_threads, top_level
from llmdiag.diagnose.io.trace import RankTrace

Span = tuple[int, int, int]  # (iteration number, start ns, end ns)
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
MIN_ITERATIONS = 2
COVER = 2 / 3  # share of the thread's top-level ops, and of the capture's time, the iterations must hold
MAX_CANDIDATES = 96  # candidate periods verified, at most
RARE_NAMES = 32  # rarest repeated names whose gaps propose periods
STRIDES = 8  # occurrences per iteration up to which a name's gaps still propose the period
ALIGN = 64  # ops compared where a warm-up iteration is aligned with the repeats
MAX_THREADS = 1  # host threads tried for a repeated pattern, longest top-level time first: the main one
BACKWARD_THREAD = 0.5  # a thread whose top-level ops are mostly backward ops is an autograd thread


def detect(t: RankTrace) -> tuple[str, list[Span]]:
    """("repeated_pattern" | "forward_backward", iterations) of the first reading that holds, else ("", [])."""
    if t.kind is None or not len(t):
        return "", []
    ops = (t.stream < 0) & t.cat_mask(*HOST_CATS_OP, "user_annotation")
    ops &= ~t.name_mask(lambda n: n.startswith("ProfilerStep#"), ops)  # none where steps.py asks; left out, a
    # capture's ProfilerSteps check the iterations found without them (tests/unit/metrics/test_iterations_real.py)
    if not ops.any():
        return "", []
    top = np.flatnonzero(top_level(t, ops))
    top = top[np.lexsort((-t.dur[top], t.ts[top]))]  # in start order on every thread
    back = t.name_mask(lambda n: n.startswith(BACKWARD_PREFIX), ops)[top]
    work = ~np.isin(t.thread[top], list(gloo_threads(t)))  # a gloo run loop's spans are collectives, not a loop
    threads = _main_threads(t, top[work], back[work])
    span = int((t.ts[top] + t.dur[top]).max() - t.ts[top].min())  # the capture's host time: every thread's ops
    for th in threads:
        spans = repeated_pattern(t, _descend(t, ops, top[t.thread[top] == th]))
        if _covers(spans, span):
            return "repeated_pattern", spans
    if threads:
        spans = forward_backward(t, top, back, threads[0])
        if _covers(spans, span):
            return "forward_backward", spans
    return "", []


def _covers(spans: list[Span], capture_ns: int) -> bool:
    """The iterations hold at least COVER of the capture's host time (not a burst of tiny ops in a long capture;
    the host's, as a GPU-bound capture's device work trails its host by up to the queue's length)."""
    return bool(spans) and spans[-1][2] - spans[0][1] >= COVER * capture_ns


def _main_threads(t: RankTrace, top: np.ndarray, back: np.ndarray) -> list[int]:
    """Host threads by their top-level ops' summed time, longest first, leaving out autograd threads (mostly
    backward ops: their repeats begin mid-iteration) unless only they are left (a CPU run's backward runs on its
    main thread)."""
    th = t.thread[top]
    n = int(th.max()) + 1 if len(th) else 0
    busy = np.bincount(th, weights=t.dur[top].astype(np.float64), minlength=n)
    count = np.bincount(th, minlength=n)
    nback = np.bincount(th[back], minlength=n)
    ok = count >= 1
    if (fwd := ok & (nback < BACKWARD_THREAD * np.maximum(count, 1))).any():
        ok = fwd
    order = [int(i) for i in np.argsort(-busy, kind="stable") if ok[i]]
    return order[:MAX_THREADS]


def _descend(t: RankTrace, ops: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """The thread's top-level ops, or, where one op (a user's annotation around the whole loop) holds nearly all
    of the thread's time, the ops one level inside it (up to 3 levels)."""
    for _ in range(3):
        if not len(seq):
            return seq
        span = int((t.ts[seq] + t.dur[seq]).max() - t.ts[seq].min())
        big = int(np.argmax(t.dur[seq]))
        if span <= 0 or t.dur[seq[big]] < 0.9 * span:
            return seq
        w = seq[big]
        inner = ops & (t.thread == t.thread[w]) & (t.ts >= t.ts[w]) & (t.ts + t.dur <= t.ts[w] + t.dur[w])
        inner[w] = False
        kids = np.flatnonzero(top_level(t, inner))
        if len(kids) < 2:
            return seq
        seq = kids[np.lexsort((-t.dur[kids], t.ts[kids]))]
    return seq


def repeated_pattern(t: RankTrace, seq: np.ndarray) -> list[Span]:
    """Iterations of one thread's top-level ops `seq` (event indices in start order) read as repeats of a period;
    [] where no period holds (see the module's doc)."""
    n = len(seq)
    if n < 2 * MIN_ITERATIONS:
        return []
    names = t.name[seq].astype(np.int64)
    starts = t.ts[seq].astype(np.int64)
    ends = np.maximum.accumulate((t.ts[seq] + t.dur[seq]).astype(np.int64))
    for p in _candidates(names):
        spans = _fit(names, starts, ends, p)
        if spans:
            return spans
    return []


def _candidates(names: np.ndarray) -> list[int]:
    """Candidate periods, ascending: for the rarest repeated names, the gaps between each occurrence and its c-th
    next (c <= STRIDES: a name run c times per iteration recurs every c-th time a period later), then the most
    frequent gaps between consecutive occurrences."""
    n, cap = len(names), len(names) // MIN_ITERATIONS
    order = np.argsort(names, kind="stable")  # positions grouped by name, ascending within each
    sn = names[order]
    edge = np.r_[0, np.flatnonzero(sn[1:] != sn[:-1]) + 1, n]
    count = np.diff(edge)
    out: set[int] = set()
    for g in [int(g) for g in np.argsort(count, kind="stable") if count[g] >= 2][:RARE_NAMES]:  # rarest first
        pos = order[edge[g]:edge[g + 1]]
        for c in range(1, min(STRIDES, len(pos) - 1) + 1):
            d = pos[c:] - pos[:-c]
            out.update(int(v) for v in np.unique(d[d <= cap]))
        if len(out) >= MAX_CANDIDATES // 2:
            break
    same = sn[1:] == sn[:-1]
    gaps = (order[1:] - order[:-1])[same]
    vals, freq = np.unique(gaps[gaps <= cap], return_counts=True)
    out.update(int(v) for v in vals[np.argsort(-freq, kind="stable")][: MAX_CANDIDATES // 2])
    return sorted(v for v in out if v > 0)[:MAX_CANDIDATES]


def _fit(names: np.ndarray, starts: np.ndarray, ends: np.ndarray, p: int) -> list[Span]:
    """The iterations if `names` is, for its longest run, periodic with period p and the run passes the checks."""
    n = len(names)
    eq = np.r_[False, names[:-p] == names[p:], False]
    edges = np.flatnonzero(np.diff(eq.astype(np.int8)))
    if not len(edges):
        return []
    run_start, run_end = edges[0::2], edges[1::2]
    j = int(np.argmax(run_end - run_start))
    o, e = int(run_start[j]), int(run_end[j]) + p  # names[o:e] is periodic
    if (e - o) // p < MIN_ITERATIONS or o > 2 * p:
        return []
    first = names[0]
    if o == 0:
        r = 0
    else:
        r = _phase(names, o, p)
        if r < 0:
            return []
    k = (e - r) // p
    if k < MIN_ITERATIONS or names[r] != first:
        return []
    bounds = [r + i * p for i in range(k + 1)]
    if r > 0:  # the warm-up iteration, from the capture's first op to the first repeat, else nothing here is a loop
        if not _warmup(names[:r], names[r:r + p]):
            return []
        bounds.insert(0, 0)
    if bounds[-1] - bounds[0] < COVER * n:
        return []
    cut = [int(starts[b]) for b in bounds[:-1]]  # each iteration ends where the next op begins; the last at the
    cut.append(int(starts[bounds[-1]]) if bounds[-1] < n else int(ends[-1]))  # capture's end: its ops' last end
    span_all = int(ends[-1] - starts[0])
    if span_all <= 0 or cut[-1] - cut[0] < COVER * span_all:
        return []
    return [(i, a, b) for i, (a, b) in enumerate(zip(cut, cut[1:])) if b > a]


def _warmup(pre: np.ndarray, period: np.ndarray) -> bool:
    """`pre` is one warm-up iteration of `period`: it runs every op of an iteration, as often (the first iteration
    runs more, never less: a one-shot call's preamble before its identical layers runs none of a layer's ops),
    in fewer than two periods' ops and with the op each iteration begins with as often as one iteration (two
    differing iterations are not one)."""
    if len(pre) >= 2 * len(period) or np.count_nonzero(pre == period[0]) != np.count_nonzero(period == period[0]):
        return False
    need, times = np.unique(period, return_counts=True)
    have, has = np.unique(pre, return_counts=True)
    at = np.searchsorted(have, need)
    found = (at < len(have)) & (have[np.minimum(at, len(have) - 1)] == need)
    return bool(found.all() and (has[at] >= times).all())


def _phase(names: np.ndarray, o: int, p: int) -> int:
    """Where the repeats begin when the ops before them (names[:o]) break the period: the position in the first
    period whose ops begin as the capture's do, on the most ops (a warm-up iteration starts as every iteration
    does); ties to a warm-up at least a period long (the first iteration runs more ops), then to the one nearest
    a period. -1 where no position of the period holds the capture's first op."""
    at = np.flatnonzero(names[o:o + p] == names[0]) + o
    if not len(at):
        return -1
    head = names[:ALIGN]
    best, key = -1, (-1, False, 0)
    for r in at.tolist():
        ahead = names[r:r + len(head)]
        m = len(ahead) if np.array_equal(ahead, head[:len(ahead)]) else int(np.argmin(ahead == head[:len(ahead)]))
        k = (min(m, p), r >= p, -abs(r - p))
        if k > key:
            best, key = r, k
    return best


def forward_backward(t: RankTrace, top: np.ndarray, back: np.ndarray, main: int) -> list[Span]:
    """Iterations closed by runs of backward ops after runs of forward ops on the main thread (module doc)."""
    sel = back | (t.thread[top] == main)
    ev, isb = top[sel], back[sel]
    if not isb.any() or isb.all():
        return []
    change = np.flatnonzero(np.r_[True, isb[1:] != isb[:-1]])  # first op of each run
    run_b = isb[change]
    fwd = [int(i) for i, b in zip(change, run_b) if not b]  # forward runs' first ops
    closes = [int(c) for c, b, prev in zip(change[1:], run_b[1:], run_b[:-1]) if b and not prev]
    if len(closes) < MIN_ITERATIONS:
        return []
    starts = [f for f in fwd if f < closes[-1]]  # forward runs followed by a backward run
    ends = np.maximum.accumulate((t.ts[ev] + t.dur[ev]).astype(np.int64))
    after = [i for i in fwd if i > closes[-1]]  # a forward run after the last backward one: optimizer, or the next
    stop = after[0] if after else len(ev)  # iteration cut short: it closes no iteration
    sizes = np.diff(np.array(starts + [stop]))
    med = float(np.median(sizes))
    if len(sizes) < MIN_ITERATIONS or (sizes < 0.5 * med).any() or (sizes > 2 * med).any():
        return []
    cut = [int(t.ts[ev[s]]) for s in starts] + [int(ends[stop - 1])]
    return [(i, a, b) for i, (a, b) in enumerate(zip(cut, cut[1:])) if b > a]
