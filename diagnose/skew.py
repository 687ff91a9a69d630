"""Arrival skew of matched collectives, clock alignment across hosts, and straggler ranks.

A collective is matched across ranks by (process group, kind, ordinal of that kind in the group): NCCL
traces carry no sequence number in Kineto's args. Ranks on different hosts have unaligned clocks; since
a collective completes at nearly the same instant on every participant, each host is shifted by the
median difference of matched completion times against the first host, before skew is measured.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import median

import numpy as np

from diagnose.results import CollectiveSkew, SkewResult

NS_PER_MS = 1e6


@dataclass
class CollectiveRecord:
    """One collective on one rank, times on the rank's absolute clock (ns since the global origin)."""

    pg: str
    kind: str
    ordinal: int
    start: int
    end: int


def align_hosts(records: dict[int, list[CollectiveRecord]], hosts: dict[int, str]) -> dict[str, float]:
    """Clock shift (ns) per host so matched collectives complete together; the first host is the reference."""
    host_list = sorted(set(hosts.values()))
    if len(host_list) < 2:
        return {h: 0.0 for h in host_list}
    ends = _matched(records)
    ref = host_list[0]
    shifts = {ref: 0.0}
    for h in host_list[1:]:
        diffs = []
        for per_rank in ends.values():
            a = [e for r, (s, e) in per_rank.items() if hosts.get(r) == ref]
            b = [e for r, (s, e) in per_rank.items() if hosts.get(r) == h]
            if a and b:
                diffs.append(median(a) - median(b))  # statistics: small lists, and no numpy.ma import
        shifts[h] = float(median(diffs)) if diffs else 0.0
    return shifts


def _matched(records: dict[int, list[CollectiveRecord]]) -> dict[tuple, dict[int, tuple[int, int]]]:
    out: dict[tuple, dict[int, tuple[int, int]]] = defaultdict(dict)
    for r, recs in records.items():
        for c in recs:
            out[(c.pg, c.kind, c.ordinal)][r] = (c.start, c.end)
    return {k: v for k, v in out.items() if len(v) >= 2}


def skew(records: dict[int, list[CollectiveRecord]], hosts: dict[int, str],
         compute_ms: dict[int, float]) -> SkewResult | None:
    shifts = align_hosts(records, hosts)
    shifted = {
        r: [CollectiveRecord(c.pg, c.kind, c.ordinal, int(c.start + shifts.get(hosts.get(r, ""), 0.0)),
                             int(c.end + shifts.get(hosts.get(r, ""), 0.0))) for c in recs]
        for r, recs in records.items()
    }
    matched = _matched(shifted)
    last = Counter()
    by: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for (pg, kind, _), per_rank in matched.items():
        starts = {r: s for r, (s, e) in per_rank.items()}
        durs = [e - s for s, e in per_rank.values()]
        sk = max(starts.values()) - min(starts.values())
        by[(pg, kind)].append((sk, min(durs)))
        hi = max(starts.values())
        latest = [r for r, s in starts.items() if s == hi]
        if len(latest) == 1:  # a tie (all ranks at once) has no last arrival; do not blame the first rank listed
            last[latest[0]] += 1
    stragglers = _stragglers(last, len(matched), compute_ms)
    if not matched and not stragglers:
        return None
    return SkewResult(
        matched=len(matched),
        by_collective=[
            CollectiveSkew(pg=pg, kind=kind, matched=len(v), mean_skew_ms=float(np.mean([a for a, _ in v])) / NS_PER_MS,
                           max_skew_ms=float(max(a for a, _ in v)) / NS_PER_MS,
                           mean_transfer_ms=float(np.mean([b for _, b in v])) / NS_PER_MS)
            for (pg, kind), v in sorted(by.items(), key=lambda kv: -np.mean([a for a, _ in kv[1]]))
        ],
        last_arrivals={str(r): n for r, n in last.most_common()},
        host_shift_ms={h: s / NS_PER_MS for h, s in shifts.items()},
        stragglers=stragglers,
    )


def _stragglers(last: Counter, matched: int, compute_ms: dict[int, float]) -> list[dict]:
    out = []
    if matched >= 3 and last:
        r, n = last.most_common(1)[0]
        n_ranks_seen = len(last)
        # Arriving last more often than chance would (1/ranks) and in at least half the collectives.
        if n / matched >= 0.5 and n_ranks_seen >= 1:
            out.append({"rank": int(r), "reason": "arrives last at collectives", "value": n / matched})
    if len(compute_ms) >= 2:
        med = float(median(compute_ms.values()))
        for r, c in sorted(compute_ms.items()):
            if med > 0 and c > med * 1.05:
                out.append({"rank": int(r), "reason": "compute per step above the median by more than 5%",
                            "value": c / med - 1})
    return out
