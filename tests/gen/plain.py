"""Interval arithmetic in plain Python, for the tests' own readings of traces: independent of llmdiag's
metrics/rank/intervals.py (numpy), so a test that checks a metric against it checks two implementations."""

from __future__ import annotations


def union(iv) -> list[list[float]]:
    """The sorted, merged union of (begin, end) intervals."""
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def covered(u, a: float, b: float) -> float:
    """How much of [a, b] the merged intervals `u` cover."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in u)
