"""profiler_overhead: a trace recorded with_stack (python_function events) gets a low caveat naming the host time
those events cost at the documented per-event cost; a plain trace, or one with few events, gets none."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.rules.profiler import MIN_EVENTS, PY_EVENT_US
from tests.gen.builder import MAIN_TID, TraceBuilder

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 80 << 30}]
STEP_US = 10_000


def _trace(tmp_path, py_events: int, shapes: bool = False):
    b = TraceBuilder(rank=0, world_size=1, device_properties=H100)
    for s in range(2):
        t0 = s * STEP_US
        b.step(s + 1, t0, t0 + STEP_US)
        b.cpu_op("aten::mm", t0 + 5, 20, args={"Input type": ["c10::BFloat16"] * 2, "Input Dims": [[8, 8], [8, 8]]}
                 if shapes else None)
        b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", t0 + 100, 8000, launch_at=t0 + 10)
        for k in range(py_events):
            b.raw({"ph": "X", "cat": "python_function", "name": f"model.py(12): forward_{k % 7}", "pid": b.pid,
                   "tid": MAIN_TID, "ts": b._abs(t0 + 30 + k % 9000), "dur": 1})
    b.write(tmp_path / "run" / "rank0.json")
    return analyze_path(str(tmp_path / "run"), jobs=1)


def _f(a):
    return [f for f in a.findings if f.id == "profiler_overhead"]


def test_with_stack_trace_gets_the_caveat(tmp_path):
    a = _trace(tmp_path, 1000, shapes=True)
    assert a.ranks[0].hints.python_events_per_step == 1000
    (f,) = _f(a)
    cost_ms = 1000 * PY_EVENT_US / 1e3  # 0.5 ms of a 10 ms step
    assert f.severity == "low" and f.gain_ms is None
    assert f"{cost_ms:.2f} ms" in f.evidence.text and "record_shapes" in f.evidence.text
    assert a.ranks[0].hints.shapes_recorded is True


@pytest.mark.parametrize("n", [0, 50])  # none; 50 stray events per step (below MIN_EVENTS)
def test_silent_twins(tmp_path, n):
    a = _trace(tmp_path, n)
    assert a.ranks[0].hints.python_events_per_step == n < MIN_EVENTS and not _f(a)
