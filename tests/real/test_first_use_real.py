"""A first-use load on a real trace (branch firstcall, issue #34 recall B9-P2), checked against the events read with
plain gzip/json (independent of llmdiag): tracelens b200_vllm's lm_head `aten::mm`, the capture's only call of its
name and Input Dims, holds a `Lazy Function Loading` and idles the GPU most of its time: one-time setup."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
B9 = "tracelens/b200_vllm_tp8_rank0.json.gz"
pytestmark = pytest.mark.real


def test_b200_once_called_mm_with_lazy_load_is_one_time():
    with gzip.open(REAL / B9, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    mm = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    dims = [json.dumps(e["args"].get("Input Dims")) for e in mm]
    once = [e for e, d in zip(mm, dims) if dims.count(d) == 1 and e["dur"] > 1000]
    assert len(once) == 1  # the lm_head matmul: 1.68 ms, its shape called once
    a, b = once[0]["ts"], once[0]["ts"] + once[0]["dur"]
    loads = [e for e in ev if e["name"] == "Lazy Function Loading" and a <= e["ts"] < b]
    assert len(loads) == 1
    dev = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    busy = sum(max(0.0, min(t, b) - max(s, a)) for s, t in dev)
    idle_ms = (b - a - busy) / 1000  # no device work overlaps: 1.68 ms
    res = _a()
    r = res.ranks[0]
    got = [s for s in r.idle.stretches if s.op == "aten::mm"]
    assert len(got) == 1 and got[0].first_use == 1 and got[0].later_calls_ms is None
    assert got[0].idle_ms == pytest.approx(idle_ms, abs=0.05)
    f = [x for x in res.findings if "one-time" in x.title]
    assert len(f) == 1 and "`aten::mm` 1.68 ms (called once; 1 first-use load in it)" in f[0].evidence.text


def _a():
    return analyze_path(str(REAL / B9), jobs=1)
