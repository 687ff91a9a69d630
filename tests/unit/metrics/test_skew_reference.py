"""The vectorised skew (diagnose/skew.py) against a plain per-collective reference written from the definition.

The generator knows which rows are one collective: per (group, kind) a run of collectives that end together
on every rank (within a jitter far below their spacing), each rank's capture a contiguous part of the run
that holds at least one collective every rank recorded, hosts' clocks offset. The reference keeps the
collectives every rank of the key recorded, shifts each host by the median over them of (median completion
on the first host - median completion on that host); skew = latest start - earliest start; the last arrival
is the one rank with the latest start (ties blame no one)."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmdiag.diagnose.metrics.rank.collectives import collectives_from

from llmdiag.diagnose.metrics.job.skew import skew


def reference(truth: dict[int, list[tuple]], hosts: dict[int, str]):
    """`truth`: rank -> (pg, kind, collective id, start, end) on the rank's own clock."""
    per_id: defaultdict[tuple, dict] = defaultdict(dict)
    ranks_of: defaultdict[tuple, set] = defaultdict(set)
    for r, rows in truth.items():
        for pg, kind, i, s, e in rows:
            per_id[(pg, kind, i)][r] = (s, e)
            ranks_of[(pg, kind)].add(r)
    full: defaultdict[tuple, int] = defaultdict(int)
    for (pg, kind, i), per in per_id.items():
        full[(pg, kind)] = max(full[(pg, kind)], len(per))
    matched = {k: v for k, v in per_id.items() if len(v) >= 2 and len(v) == full[k[:2]]}
    hl = sorted(set(hosts.values()))
    shift = {h: 0 for h in hl}
    for h in hl[1:]:
        diffs = []
        for per in matched.values():
            a = [2 * e for r, (s, e) in per.items() if hosts[r] == hl[0]]
            b = [2 * e for r, (s, e) in per.items() if hosts[r] == h]
            if a and b:
                diffs.append(median(a) - median(b))
        shift[h] = round(median(diffs) / 2) if diffs else 0
    by: defaultdict[tuple, list] = defaultdict(list)
    last: Counter[int] = Counter()
    for (pg, kind, _), per in matched.items():
        starts = {r: s + shift[hosts[r]] for r, (s, e) in per.items()}
        hi = max(starts.values())
        by[(pg, kind)].append((hi - min(starts.values()), min(e - s for s, e in per.values())))
        top = [r for r, s in starts.items() if s == hi]
        if len(top) == 1:
            last[top[0]] += 1
    return len(matched), by, last, shift


@st.composite
def captures(draw, max_ranks=5, common: int = 1):
    """rank -> (pg, kind, id, start, end): per key a run of collectives ending together (jitter ≤ 100 ns,
    spacing ≥ 2 µs), each starting after the previous one's end on its rank; each rank records a contiguous
    part of the run around `common` consecutive collectives all record (a host's clock offset is identified
    only by two or more completions in common: with one, nothing tells an offset from another collective)."""
    n_ranks = draw(st.integers(2, max_ranks))
    out: dict[int, list[tuple]] = {r: [] for r in range(n_ranks)}
    for pg, kind in draw(st.lists(st.sampled_from([("", "allreduce"), ("0", "allgather"), ("1", "allreduce")]),
                                  min_size=1, max_size=3, unique=True)):
        n = draw(st.integers(common, 8))
        gaps = draw(st.lists(st.integers(2_000, 100_000), min_size=n, max_size=n))
        ends = [sum(gaps[:i + 1]) for i in range(n)]
        first = draw(st.integers(0, n - common))
        for r in range(n_ranks):
            lo, hi = draw(st.integers(0, first)), draw(st.integers(first + common, n))
            for i in range(lo, hi):
                e = ends[i] + draw(st.integers(0, 100))
                s = e - draw(st.integers(0, gaps[i] - 200))
                out[r].append((pg, kind, i, s, e))
    return out


# Found by Hypothesis (1 in a few thousand runs): rank 0 ends at 2, 4 µs, rank 1 (the reference, most rows) at
# 4, 6, 14, 22 µs; only the 4 µs collective is common. Both of rank 0's rows fall nearest to 4 µs; the matcher
# kept the 2 µs row there (2 µs off, just inside a quarter of the median spacing 8 µs) and moved the exact 4 µs
# row to 6 µs: two matches each 2 µs off instead of one exact one (collective_match._untie: the nearer row keeps).
LATE_PERIODIC = ({0: [("", "allreduce", 0, 2000, 2000), ("", "allreduce", 1, 4000, 4000)],
                  1: [("", "allreduce", 1, 4000, 4000), ("", "allreduce", 2, 6000, 6000),
                      ("", "allreduce", 3, 14000, 14000), ("", "allreduce", 4, 22000, 22000)]}, 1, 0)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.tuples(captures(), st.just(1), st.just(0)),
                 st.tuples(captures(common=3), st.integers(2, 3), st.integers(-300, 300))))
@example(LATE_PERIODIC)
def test_skew_equals_reference(case):
    """Several hosts: clocks within a sixth of the smallest spacing (synchronised hosts, captures starting
    anywhere). From completion times alone a periodic run shifted by whole collectives cannot be told from a
    clock offset of that much, so large offsets are tested on aperiodic jobs (test_alignment_late_capture:
    ±1 s host clocks; test_metrics_exact: 5 s)."""
    truth, n_hosts, offset = case
    truth = {r: [(pg, k, i, s + (offset if r % n_hosts else 0), e + (offset if r % n_hosts else 0))
                 for pg, k, i, s, e in v] for r, v in truth.items()}
    recs = {r: sorted(((pg, k, s, e) for pg, k, _, s, e in v), key=lambda x: x[2]) for r, v in truth.items()}
    hosts = {r: f"h{r % n_hosts}" for r in recs}
    got = skew({r: collectives_from(v) for r, v in recs.items()}, hosts, {})
    n, by, last, shift = reference(truth, hosts)
    if not n:
        assert got is None or got.matched == 0
        return
    assert got.matched == n
    assert got.host_shift_ms == {h: s / 1e6 for h, s in shift.items()}
    assert {(c.pg, c.kind): (c.matched, c.max_skew_ms) for c in got.by_collective} == \
        {k: (len(v), max(a for a, _ in v) / 1e6) for k, v in by.items()}
    for c in got.by_collective:
        v = by[(c.pg, c.kind)]
        assert c.mean_skew_ms == pytest.approx(sum(a for a, _ in v) / len(v) / 1e6)
        assert c.mean_transfer_ms == pytest.approx(sum(b for _, b in v) / len(v) / 1e6)
    assert got.last_arrivals == {str(r): k for r, k in last.items()}


def late_reference(truth: dict[int, list[tuple]]):
    """Per collective every rank of its key recorded, from the definition: sort arrivals; if the largest gap
    between consecutive ones is at least half the skew, the ranks after its first occurrence are late, else the
    last alone (none on a tie); Σ lateness per late rank; where one rank alone is last, the wait it imposed
    (its start − the second-latest); Σ (latest − own start) per rank. One host: no clock shift."""
    per_id: defaultdict[tuple, dict] = defaultdict(dict)
    for r, rows in truth.items():
        for pg, kind, i, s, e in rows:
            per_id[(pg, kind, i)][r] = s
    full: defaultdict[tuple, int] = defaultdict(int)
    for k, per in per_id.items():
        full[k[:2]] = max(full[k[:2]], len(per))
    late: dict[tuple, list] = {}
    late_by: Counter[int] = Counter()
    imposed_by: Counter[int] = Counter()
    wait_by: Counter[int] = Counter()
    for k, per in per_id.items():
        if len(per) < 2 or len(per) < full[k[:2]]:
            continue
        arr = sorted((s, r) for r, s in per.items())
        spread = arr[-1][0] - arr[0][0]
        gaps = [arr[i][0] - arr[i - 1][0] for i in range(1, len(arr))]
        big = max(gaps)
        if big > 0 and 2 * big >= spread:
            cut = gaps.index(big) + 1
            names = [r for _, r in arr[cut:]]
        else:
            names = [arr[-1][1]] if gaps[-1] > 0 else []
        late[k] = names
        if gaps[-1] > 0:
            imposed_by[arr[-1][1]] += gaps[-1]
        for s, r in arr:
            if r in names:
                late_by[r] += s - arr[0][0]
            wait_by[r] += arr[-1][0] - s
    return late, late_by, imposed_by, wait_by


arrivals = st.lists(st.lists(st.integers(0, 10_000), min_size=2, max_size=4), min_size=3, max_size=7)


def _columns(a):
    """Arrival columns -> one all-reduce per column, every rank ending together 10 µs after the latest start."""
    cols = list(zip(*[c[:min(map(len, a))] for c in a]))
    return {r: [("0", "allreduce", i, 100_000 * i + s, 100_000 * i + 20_000) for i, s in enumerate(col)]
            for r, col in enumerate(cols)}


@settings(max_examples=300, deadline=None)
@given(st.one_of(captures(), arrivals.map(_columns)))
def test_late_ranks_equal_reference(truth):
    recs = {r: sorted(((pg, k, s, e) for pg, k, _, s, e in v), key=lambda x: x[2]) for r, v in truth.items()}
    got = skew({r: collectives_from(v) for r, v in recs.items()}, {r: "h0" for r in recs}, {})
    late, late_by, imposed_by, wait_by = late_reference(truth)
    if got is None:
        assert not late
        return
    assert got.late_ms_by_rank == pytest.approx({str(r): v / 1e6 for r, v in late_by.items() if v > 0})
    assert got.wait_ms_by_rank == pytest.approx({str(r): v / 1e6 for r, v in wait_by.items() if v > 0})
    assert got.imposed_ms_by_rank == pytest.approx({str(r): v / 1e6 for r, v in imposed_by.items() if v > 0})
    for x in got.late:
        ids = {k[2] for k in late if k[:2] == (x.pg, x.kind)}
        assert x.late_ranks in [late[(x.pg, x.kind, i)] for i in ids]
