"""hta/nccl_data's optimizer step and all-reduces, computed here from the events (plain gzip/json), against
llmdiag's records and its optimizer_step / low_busbw findings (issue #34 recall, branch ncclsync)."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
pytestmark = pytest.mark.real
NCCL = "hta/nccl_data.json.gz"


@cache
def _events() -> list:
    with gzip.open(REAL / NCCL) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


@cache
def _a():
    return analyze_path(str(REAL / NCCL), jobs=1)


def _union(xs: list) -> list:
    out: list = []
    for a, b in sorted(xs):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def test_foreach_sgd_from_the_events():
    """3 spans; inside them the `_foreach_*` ops on the span's thread and the device idle (every device event)."""
    ev = _events()
    spans = [e for e in ev if e.get("cat") == "user_annotation" and e["name"] == "Optimizer.step#SGD.step"]
    busy = _union([(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")])
    idle = foreach = 0.0
    for s in spans:
        a, b = s["ts"], s["ts"] + s["dur"]
        idle += (b - a) - sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)
        foreach += sum(1 for e in ev if e.get("cat") == "cpu_op" and e["tid"] == s["tid"] and a <= e["ts"] < b
                       and e["name"].startswith("aten::_foreach_"))
        assert not any(e.get("cat") == "cpu_op" and "_fused_" in e["name"] and a <= e["ts"] < b for e in ev)
    o = _a().ranks[0].optimizer
    assert o is not None and o.impl == "foreach" and o.multi_tensor
    assert o.foreach_ops == pytest.approx(foreach / len(spans)) and foreach == 9
    assert o.idle_ms == pytest.approx(idle / 1000 / len(spans), rel=1e-3)
    f = {f.id: f for f in _a().findings}["optimizer_step"]
    assert "SGD(..., fused=True)" in f.action and "foreach=True" not in f.action
    assert f.gain_ms == pytest.approx(idle / 1000 / len(spans), rel=1e-3) and f.gain_kind == "bound"


def test_allreduce_off_the_path_from_the_events():
    """Every step's last all-reduce ends before the next compute-stream op is launched (nothing waits on it); the
    finding's later bound is the kernels' time per step x (1 - busbw / 20 GB/s), from their sizes and times."""
    ev = _events()
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    ar = sorted((e for e in ev if e.get("cat") == "kernel" and "AllReduce" in e["name"]), key=lambda e: e["ts"])
    comp = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy") and e["tid"] != ar[0]["tid"]),
                  key=lambda e: e["ts"])
    for last in ar[4::5]:  # 5 buckets per step
        end = last["ts"] + last["dur"]
        nxt = next(e for e in comp if e["ts"] >= end)
        assert launch[nxt["args"]["correlation"]] > end
    steps = len(ar) / 5
    ms = sum(e["dur"] for e in ar) / 1000 / steps
    gbps = sum(e["args"]["In msg nelems"] * 4 for e in ar) / (sum(e["dur"] for e in ar) * 1e3)
    f = {f.id: f for f in _a().findings}["low_busbw"]
    assert f.severity == "low" and f.gain_ms is not None and f.gain_ms < 0.01 * _a().ranks[0].step_time_ms
    assert f"up to {ms * (1 - gbps / 20.0):.2f} ms per step" in f.expected_gain
    assert "late peer" in f.evidence.text and "1 rank of 2 traced" in f.evidence.text
