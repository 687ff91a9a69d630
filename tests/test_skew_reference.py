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
