"""The device's waits for launches, from the events alone: `python -m tests.expert.truth.launch PATH`.

Over the host ProfilerSteps' span, each gap between device events (kernels, memcpys, memsets, by start; the device
busy until the latest end so far) whose next event's launch call (the first runtime call of its correlation id)
began at or after the gap began: the device had nothing queued and waited for the host. Per step (mean over the
ProfilerSteps): that idle in gaps under 1 ms and in longer ones, how many gaps, and the part inside launch calls
(any runtime call that launched a device event). Independent of llmdiag (tests/expert/expectations.py quotes it).
"""

from __future__ import annotations

import bisect
import sys

from .load import read

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
SHORT_US = 1000.0


def waits(path: str) -> dict:
    t = read(path)
    calls: dict = {}
    for e in t.cat("cuda_runtime", "cuda_driver"):
        c = (e.get("args") or {}).get("correlation")
        if c is not None and c not in calls:
            calls[c] = e
    dev = [e for e in t.cat(*DEVICE) if (e.get("args") or {}).get("correlation") in calls]
    dev.sort(key=lambda e: e["ts"])
    steps = sorted((e for e in t.events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    if not dev or not steps:
        return {}
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    spans = sorted((calls[e["args"]["correlation"]]["ts"], calls[e["args"]["correlation"]]["ts"] +
                    calls[e["args"]["correlation"]]["dur"]) for e in dev)
    out = {"short_ms": 0.0, "short_gaps": 0, "short_in_launch_ms": 0.0, "long_ms": 0.0, "long_gaps": 0}
    end = dev[0]["ts"] + dev[0]["dur"]
    for e in dev[1:]:
        call = calls[e["args"]["correlation"]]
        if e["ts"] > end and lo <= call["ts"] < hi and call["ts"] >= end:
            g0, g1 = end, e["ts"]
            if g1 - g0 < SHORT_US:
                out["short_ms"] += (g1 - g0) / 1000
                out["short_gaps"] += 1
                out["short_in_launch_ms"] += _covered(spans, g0, g1) / 1000
            else:
                out["long_ms"] += (g1 - g0) / 1000
                out["long_gaps"] += 1
        end = max(end, e["ts"] + e["dur"])
    n = len(steps)
    return {k: round(v / n, 3) for k, v in out.items()} | {"steps": n}


def _covered(spans: list, g0: float, g1: float) -> float:
    """|[g0, g1] ∩ union(spans)|: spans sorted by start, each shorter than 20 ms."""
    i, cur, got = bisect.bisect_left(spans, (g0 - 20000.0,)), g0, 0.0
    while i < len(spans) and spans[i][0] < g1:
        s, t = max(spans[i][0], cur), min(spans[i][1], g1)
        if t > s:
            got, cur = got + t - s, t
        i += 1
    return got


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p, waits(p))
