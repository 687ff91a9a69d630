"""The vectorised skew (diagnose/skew.py) against a plain per-collective reference written from the definition:
match by (group, kind, ordinal); shift each host by the median over matched collectives of (median completion
on the first host - median completion on that host); skew = latest start - earliest start; the last arrival is
the one rank with the latest start (ties blame no one)."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.metrics.skew import collectives_from, skew


def reference(recs: dict[int, list[tuple]], hosts: dict[int, str]):
    matched = defaultdict(dict)
    for r, rows in recs.items():
        n = Counter()
        for pg, kind, s, e in rows:
            matched[(pg, kind, n[(pg, kind)])][r] = (s, e)
            n[(pg, kind)] += 1
    matched = {k: v for k, v in matched.items() if len(v) >= 2}
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
    by, last = defaultdict(list), Counter()
    for (pg, kind, _), per in matched.items():
        starts = {r: s + shift[hosts[r]] for r, (s, e) in per.items()}
        hi = max(starts.values())
        by[(pg, kind)].append((hi - min(starts.values()), min(e - s for s, e in per.values())))
        top = [r for r, s in starts.items() if s == hi]
        if len(top) == 1:
            last[top[0]] += 1
    return len(matched), by, last, shift


rows = st.lists(st.tuples(st.sampled_from(["", "0", "1"]), st.sampled_from(["allreduce", "allgather"]),
                          st.integers(0, 10**6), st.integers(0, 10**4)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(0, 5), rows, min_size=2, max_size=5), st.integers(1, 3), st.integers(-10**9, 10**9))
def test_skew_equals_reference(per_rank, n_hosts, offset):
    recs = {r: sorted(((pg, k, s + (offset if r % n_hosts else 0), s + d + (offset if r % n_hosts else 0))
                       for pg, k, s, d in v), key=lambda x: x[2]) for r, v in per_rank.items()}
    hosts = {r: f"h{r % n_hosts}" for r in recs}
    got = skew({r: collectives_from(v) for r, v in recs.items()}, hosts, {})
    n, by, last, shift = reference(recs, hosts)
    if not n:
        assert got is None
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


def late_reference(recs: dict[int, list[tuple]]):
    """Per matched collective from the definition: sort arrivals; if the largest gap between consecutive ones
    is at least half the skew, the ranks after its first occurrence are late, else the last alone (none on a
    tie); Σ lateness per late rank, Σ (latest − own start) per rank. One host: no clock shift."""
    matched = defaultdict(dict)
    for r, rows in recs.items():
        n = Counter()
        for pg, kind, s, e in rows:
            matched[(pg, kind, n[(pg, kind)])][r] = s
            n[(pg, kind)] += 1
    late, late_by, imposed_by, wait_by = {}, Counter(), Counter(), Counter()
    for k, per in matched.items():
        if len(per) < 2:
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
        punctual = arr[len(arr) - len(names) - 1][0]
        for s, r in arr:
            if r in names:
                late_by[r] += s - arr[0][0]
                imposed_by[r] += s - punctual
            wait_by[r] += arr[-1][0] - s
    return late, late_by, imposed_by, wait_by


arrivals = st.lists(st.lists(st.integers(0, 10_000), min_size=2, max_size=4), min_size=3, max_size=7)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.dictionaries(st.integers(0, 5), rows, min_size=2, max_size=5),
                 arrivals.map(lambda a: {r: [("0", "allreduce", s, 10) for s in col] for r, col in enumerate(
                     zip(*[c[:min(map(len, a))] for c in a]))})))
def test_late_ranks_equal_reference(per_rank):
    recs = {r: sorted(((pg, k, s, s + d) for pg, k, s, d in v), key=lambda x: x[2]) for r, v in per_rank.items()}
    got = skew({r: collectives_from(v) for r, v in recs.items()}, {r: "h0" for r in recs}, {})
    late, late_by, imposed_by, wait_by = late_reference(recs)
    if got is None:
        assert not late
        return
    assert got.late_ms_by_rank == pytest.approx({str(r): v / 1e6 for r, v in late_by.items() if v > 0})
    assert got.wait_ms_by_rank == pytest.approx({str(r): v / 1e6 for r, v in wait_by.items() if v > 0})
    assert got.imposed_ms_by_rank == pytest.approx({str(r): v / 1e6 for r, v in imposed_by.items() if v > 0})
    for x in got.late:
        assert x.late_ranks == late[(x.pg, x.kind, x.ordinal)]
