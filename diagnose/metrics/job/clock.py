"""Each rank's clock shift: the one place it is computed.

A rank's times are ns from its own trace origin. Two corrections put them on the job's common clock: the
origin's distance from the earliest rank's (`origin_offsets`: what the collectives are matched on), then the
skew of the rank's host that the matched collectives measured (metrics/job/skew.py). `clock_shifts` adds them
once; every later reader (the pipeline, the p2p matching, the replay, the what-if, the timeline) takes the
result from the Job (state.py) or `RankMetrics.clock_shift_ns`, never works it out again.
"""

from __future__ import annotations

import math

from llmdiag.diagnose.metrics.rank.per_rank import RankOutput
from llmdiag.diagnose.model.analysis import Issue
from llmdiag.diagnose.model.format import NS_PER_MS

MAX_CLOCK_US = 2.0**52  # µs (~142 years): beyond it a float clock has lost its µs and the trace is not a real clock


def origin_offsets(good: list[RankOutput], issues: list[Issue]) -> dict[int, int]:
    """ns from the earliest rank's time 0 to each rank's; a rank with an absurd clock origin is not aligned.
    `good`: resolved ranks (metrics/job/ranks.py), each with its rank and metrics."""
    us = [(o, o.rank, o.metrics.origin_us) for o in good if o.rank is not None and o.metrics is not None]
    ok = [u for _, _, u in us if math.isfinite(u) and abs(u) < MAX_CLOCK_US]
    origin = min(ok) if ok else 0.0
    out = {}
    for o, r, u in us:
        d = (u - origin) * 1000
        if not math.isfinite(d) or abs(d) >= 2**62:
            issues.append(Issue(o.path, f"implausible clock origin ({u:g} µs): not aligned with the other ranks", r,
                                "warning"))
            d = 0.0
        out[r] = int(round(d))
    return out


def clock_shifts(offset: dict[int, int], hosts: dict[int, str], host_shift_ms: dict[str, float]) -> dict[int, int]:
    """rank -> whole ns added to its rank-relative times: its origin offset plus its host's skew shift."""
    return {r: off + round(host_shift_ms.get(hosts.get(r, ""), 0.0) * NS_PER_MS) for r, off in offset.items()}
