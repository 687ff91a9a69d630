"""A capture of cold steps only on a real trace (branch coldstep, issue #34 recall B7-P1), checked against the events
read with plain gzip/json (independent of llmdiag): hta amd_mi250_minitoy's one iteration, ProfilerStep#1, holds a
6.54 ms `hipLaunchKernel` (the first launch of its kernel) beside kernels of a few µs; ProfilerStep#2 holds no event
(the profiler's stop)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
B7 = "hta/amd_mi250_minitoy.json.gz"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
pytestmark = pytest.mark.real


def _union_ms(spans) -> float:
    tot, a, b = 0.0, None, None
    for s, e in sorted(spans):
        if b is None or s > b:
            tot += (b - a) if b is not None else 0.0
            a, b = s, e
        else:
            b = max(b, e)
    return (tot + ((b - a) if b is not None else 0.0)) / 1000


def test_minitoy_cold_step_read_against_the_events():
    with gzip.open(REAL / B7, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    (s1, s2) = steps
    a2, b2 = s2["ts"], s2["ts"] + s2["dur"]
    assert not [e for e in ev if a2 <= e["ts"] <= b2 and e is not s2]  # the stub: no event starts in it
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e["name"]]
    first = max(launches, key=lambda e: e["dur"])  # the 6.54 ms `hipLaunchKernel` under AccumulateGrad's add_
    rest_calls_ms = (sum(e["dur"] for e in launches) - first["dur"]) / 1000  # 13 calls of 3.7-12.7 µs: 0.10 ms
    dev = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in DEVICE]
    window_ms = (max(t for _, t in dev) - min(s for s, _ in dev)) / 1000  # step 1's device work: 8.91 ms
    busy_ms = _union_ms(dev)  # 0.149 ms
    kernels = sum(e.get("cat") == "kernel" for e in ev)  # 14

    a = analyze_path(str(REAL / B7))
    (r,) = a.ranks
    assert [st.step for st in r.steps] == [1] and r.step_time_ms == pytest.approx(window_ms, abs=0.002)
    (f,) = [x for x in a.findings if x.id == "cold_capture"]
    assert f.severity == "low" and f.gain_ms is None and f.evidence.steps == [1]
    t = f.evidence.text
    assert f"`hipLaunchKernel` {first['dur'] / 1000:.2f} ms in step 1" in t
    assert f"the rest of the step's critical path, {window_ms - first['dur'] / 1000:.2f} ms of {window_ms:.2f} ms" in t
    assert f"busy {busy_ms:.2f} ms per step ({100 * busy_ms / (window_ms - first['dur'] / 1000):.1f}% of that rest, " \
           f"{100 * busy_ms / window_ms:.1f}% of the whole step); {kernels} kernels per step" in t
    assert f"launch calls take {rest_calls_ms:.2f} ms per step besides the one-time ones" in t
    host = float(t.split("ms, is ")[1].split("% host")[0])
    assert host >= 100 * (1 - busy_ms / (window_ms - first["dur"] / 1000)) - 5  # the device at most its busy time
    assert "host-bound" in f.action and "schedule(wait=1, warmup=2, active=5)" in f.action
