"""Frequent kernel sequences (HTA's get_frequent_cuda_kernel_sequences): runs of kernels one top-level host op
launched back to back on one stream, counted over the analysed steps. A run that repeats with much time is a
fusion candidate (torch.compile, a fused kernel).

A sequence is a contiguous n-gram, MIN_LEN..MAX_LEN kernels, of the compute kernels one instance of a top-level
host op (a cpu_op no other cpu_op on its thread encloses) launched on one stream in one step, in start order.
Counted by a 64-bit hash of (op name id, kernel name ids), rolled one kernel at a time: O(events × MAX_LEN),
never quadratic. Bounded: per length at most MAX_NGRAMS // (MAX_LEN - 1) distinct n-grams are kept (the most
time first), a sequence must occur at least max(MIN_COUNT, steps) times, a sequence inside one with more time
and as many occurrences (or that one shifted by a kernel: a run longer than MAX_LEN) is dropped, and TOP
sequences per rank are returned, the most kernel time first.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMPUTE, CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.kernel_views import KernelSeq, RankSequences

MIN_LEN, MAX_LEN = 2, 6  # kernels per sequence
TOP = 10  # sequences kept per rank (and over the job)
MIN_COUNT = 3  # fewest occurrences (and at least one per analysed step on average)
MAX_NGRAMS = 100_000  # distinct n-grams tracked per rank, all lengths together
EXAMINED = 32  # candidates examined per row kept (the most time first), bounding the overlap checks
NAME_CUT = 2048  # characters kept of a name (composable-kernel names run to 2,000; a cut name stays mangled)
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def kernel_sequences(t: RankTrace, wins: list[Window], top: int = TOP) -> RankSequences:
    """The rank's frequent kernel sequences (see module doc); empty rows where no op launched two kernels."""
    dev = np.flatnonzero(in_windows(t, (t.kind == COMPUTE) & (t.stream >= 0), wins))
    out = RankSequences(kernel_ms=float(t.dur[dev].sum()) / 1e6, steps=len(wins))
    ops = _top_level(t)
    if len(dev) < MIN_LEN or not len(ops) or t.kind is None:
        return out
    by_dev = host_ops.launching_ops(t, ops, t.kind)
    op = np.fromiter((by_dev.get(d, -1) for d in dev.tolist()), np.int64, len(dev))
    dev, op = dev[op >= 0], op[op >= 0]
    if len(dev) < MIN_LEN:
        return out
    step = np.searchsorted(np.array([w.start for w in wins], np.int64), t.ts[dev], side="right")
    order = np.lexsort((t.ts[dev], op, t.stream[dev], step))
    dev, op, step = dev[order], op[order], step[order]
    new = (np.diff(op) != 0) | (np.diff(t.stream[dev]) != 0) | (np.diff(step) != 0)
    seg = np.r_[0, np.cumsum(new)]  # one run per (step, stream, op instance)
    cand = ngram_candidates(t.name[op].astype(np.int64), t.name[dev].astype(np.int64), seg,
                            t.dur[dev].astype(np.float64), max(MIN_COUNT, len(wins)))
    rows: list[tuple[int, int, int, float]] = []  # (start position, length, count, total ns)
    seen: list[tuple[int, list[int], int]] = []  # (op name, kernels, count) of every candidate examined
    for pos, n, count, total in cand[:EXAMINED * top]:
        seq = t.name[dev[pos:pos + n]].tolist()
        o = int(t.name[op[pos]])
        covered = any(c2 >= count and o2 == o and _covers(s2, seq) for o2, s2, c2 in seen)
        seen.append((o, seq, count))
        if covered:
            continue  # the same occurrences as a sequence with more time examined before
        rows.append((pos, n, count, total))
        if len(rows) == top:
            break
    out.rows = [KernelSeq(op=t.names[t.name[op[p]]][:NAME_CUT], kernels=[t.names[i][:NAME_CUT] for i in t.name[dev[p:p + n]].tolist()],
                          count=c, total_ms=tot / 1e6) for p, n, c, tot in rows]
    return out


def ngram_candidates(op_name: np.ndarray, name: np.ndarray, segment: np.ndarray, dur: np.ndarray,
                     floor: int) -> list[tuple[int, int, int, float]]:
    """(first position, length, occurrences, total duration) of the n-grams of `name` that stay inside one run of
    equal `segment` values, keyed with `op_name`, occurring at least `floor` times: the most time first, at most
    MAX_NGRAMS // (MAX_LEN - 1) per length. Inputs are aligned arrays in sequence order."""
    n = len(name)
    per_len = MAX_NGRAMS // (MAX_LEN - 1)
    h = _mix(op_name.astype(np.uint64))
    total = np.zeros(n)
    out: list[tuple[int, int, int, float]] = []
    with np.errstate(over="ignore"):
        for k in range(1, MAX_LEN + 1):
            m = n - k + 1
            if m <= 0:
                break
            h = _mix(h[:m] * np.uint64(0x100000001B3) ^ name[k - 1:].astype(np.uint64))
            total = total[:m] + dur[k - 1:]
            if k < MIN_LEN:
                continue
            pos = np.flatnonzero(segment[:m] == segment[k - 1:])
            if not len(pos):
                continue
            keys, first, inv = np.unique(h[pos], return_index=True, return_inverse=True)
            count = np.bincount(inv.reshape(-1), minlength=len(keys))
            time = np.bincount(inv.reshape(-1), weights=total[pos], minlength=len(keys))
            ok = np.flatnonzero(count >= floor)
            if len(ok) > per_len:  # the cap: the per_len n-grams with the most time
                ok = ok[np.argpartition(-time[ok], per_len - 1)[:per_len]]
            out += zip(pos[first[ok]].tolist(), [k] * len(ok), count[ok].tolist(), time[ok].tolist())
    out.sort(key=lambda x: (-x[3], -x[1], x[0]))
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit (uint64, wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & _MASK
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & _MASK
    return x ^ (x >> np.uint64(31))


def _covers(long: list[int], short: list[int]) -> bool:
    """`short` lies inside `long`, or is `long` shifted by one kernel (a run longer than MAX_LEN, seen through
    the window)."""
    n = len(short)
    if n == len(long):
        return short[1:] == long[:-1] or short[:-1] == long[1:]
    return n < len(long) and any(long[i:i + n] == short for i in range(len(long) - n + 1))


def _top_level(t: RankTrace) -> np.ndarray:
    """Host cpu_ops no other cpu_op on their thread encloses (sorted by start, longer first: linear after it)."""
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
    if not len(ops):
        return ops
    ops = ops[np.lexsort((-t.dur[ops], t.ts[ops], t.thread[ops]))]
    end = t.ts[ops] + t.dur[ops]
    keep = np.ones(len(ops), bool)
    th = t.thread[ops]
    cuts = np.flatnonzero(np.diff(th)) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(ops)]):
        reach = np.maximum.accumulate(end[a:b])
        keep[a + 1:b] = t.ts[ops[a + 1:b]] >= reach[:-1]
    return ops[keep]
