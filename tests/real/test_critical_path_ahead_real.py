"""The per-rank critical path on a rank whose host runs ahead of its device but now and then lets the queue drain
(hta/trace_diff control.json, A100, rank 3 of 8: launch-to-kernel delay median 0.62 ms, the device ~84 % busy),
against the events read with plain gzip/json. Before critical_path/ahead.py, one short wait on a late launch sent
the walk back along the host thread through everything it ran while the device computed: 61 % cpu_bound.

The host can hold a step only where the compute streams (the streams running non-NCCL kernels) sat idle behind a
launch (a gap ended by an op launched after the gap began), or ran an op that had itself waited on its launch (that
op's time lies inside the host's chain: the host was the later dependency). So each step's cpu_bound stays within
those two shares, plus 2 points: rounding, and one op per step that waited on an event the trace does not record
(step 1012's permute kernel on stream 20, 0.73 ms after its launch, reads as launch-bound; ahead.py). And where
the whole device sat idle behind a late launch, nothing else can hold the step: cpu_bound plus the launch delay
covers that share, less 2 points.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
TRD = ("hta/trace_diff/control.json.gz", "hta/trace_diff/test.json.gz")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(rel: str) -> list[dict]:
    with gzip.open(REAL / rel) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]


def _late(ops: list[dict], launch: dict, a: float, b: float) -> tuple[float, float]:
    """(µs of [a, b] the union of `ops` sat idle in gaps ended by an op launched after the gap began, µs of [a, b]
    those ops ran)."""
    idle = busy = 0.0
    busy_to = None
    for e in ops:
        s, t = e["ts"], e["ts"] + e["dur"]
        if busy_to is not None and s > busy_to and launch.get(e["args"].get("correlation"), -1) > busy_to:
            idle += max(0.0, min(s, b) - max(busy_to, a))
            busy += max(0.0, min(t, b) - max(s, a))
        busy_to = t if busy_to is None else max(busy_to, t)
    return idle, busy


@pytest.mark.real(*TRD)
@pytest.mark.parametrize("rel", TRD)
def test_host_ahead_of_its_device_holds_only_its_late_launches(rel):
    ev = _events(rel)
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    dev = [e for e in ev if e.get("cat") in DEVICE_CATS]
    streams = {e["args"].get("stream") for e in dev if e["cat"] == "kernel" and not e["name"].startswith("nccl")}
    compute = sorted((e for e in dev if not e["name"].startswith("nccl") and e["args"].get("stream") in streams),
                     key=lambda e: e["ts"])
    every = sorted(dev, key=lambda e: e["ts"])
    out = run_job(RankJob(str(REAL / rel)))
    assert out.error is None, out.error
    m = out.metrics
    for s in m.steps:
        a = m.origin_us + s.start_ms * 1e3
        b = a + s.time_ms * 1e3
        idle, ran = _late(compute, launch, a, b)
        bound = 100 * (idle + ran) / (b - a)
        cp = s.critical_path
        assert cp.cpu_bound <= bound + 2, (s.step, bound, cp)
        device_idle = 100 * _late(every, launch, a, b)[0] / (b - a)
        assert cp.cpu_bound + cp.gpu_kernel_launch_overhead >= device_idle - 2, (s.step, device_idle, cp)
    if rel.endswith("control.json.gz"):  # the rank's own reading: mostly its device's
        assert m.critical_path.cpu_bound < 30
        assert m.critical_path.gpu_compute_bound + m.critical_path.gpu_communication_bound > 65
