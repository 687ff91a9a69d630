"""phase_cover (metrics/rank/phase_cover.py): per top-level host phase, its span per step and the part recorded host
ops or runtime calls (any thread) cover. Generated steps of 10,000 µs (answers by construction): `## forward ##`
[100, 4,100] with an `aten::mm` over all of it on the main thread (4.00 of 4.00 ms covered); `## backward ##`
[4,200, 9,200] holding a nested `## inner ##` annotation (not a phase of its own) and, on the autograd thread, one
1,000-µs op [5,000, 6,000] plus a runtime call [5,500, 6,500] overlapping it (covered: [5,000, 6,500] = 1.50 of
5.00 ms)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.phase_cover import phase_cover
from llmdiag.diagnose.metrics.rank.steps import windows
from tests.gen.builder import TraceBuilder

STEP = 10_000


def test_phase_cover_reads_each_top_level_phase_and_its_recorded_part(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        b.annotation("## forward ##", t + 100, 4000)
        b.cpu_op("aten::mm", t + 100, 4000)
        b.kernel("volta_sgemm_128x64_tn", t + 150, 3000, launch_at=t + 120)
        b.annotation("## backward ##", t + 4200, 5000)
        b.annotation("## inner ##", t + 4300, 200)
        b.cpu_op("MmBackward0", t + 5000, 1000, tid=200)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": b.pid, "tid": 200,
               "ts": b._abs(t + 5500), "dur": 1000, "args": {"correlation": 50_000 + n}})
    t = load_trace(b.write(tmp_path / "r.json"))
    classify(t)
    wins, _ = windows(t)
    got = {p.name: p for p in phase_cover(t, wins)}
    assert set(got) == {"## forward ##", "## backward ##"}
    assert got["## forward ##"].span_ms == pytest.approx(4.0) and got["## forward ##"].covered_ms == pytest.approx(4.0)
    assert got["## backward ##"].span_ms == pytest.approx(5.0)
    assert got["## backward ##"].covered_ms == pytest.approx(1.5)
