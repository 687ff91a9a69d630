"""cold_capture's preconditions on the planted job of tests/expert/planted_recall_coldstep.py (its docstring gives
the answers by hand): it fires on one cold step among the profiler's first three, the same from a summary read back,
and is silent on the same cold step numbered late (a process already running) or where a step pays no one-time
cost."""

from __future__ import annotations

import json

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.rules import findings
from tests.expert.planted_recall_coldstep import _job


def _cold(tmp_path, **kw):
    _job(str(tmp_path), "j", **kw)
    a = analyze_path(str(tmp_path))
    return a, [f for f in a.findings if f.id == "cold_capture"]


def test_one_cold_step_fires_without_gain_and_reads_back(tmp_path):
    a, got = _cold(tmp_path, cold_first=True, steps=[1], stub=True)
    (f,) = got
    assert f.severity == "low" and f.gain_ms is None and f.evidence.steps == [1]
    assert "2.11 ms of 7.11 ms" in f.evidence.text  # 7.106 ms window less the 5.000 ms launch call
    assert "`torch.profiler.schedule(wait=1, warmup=2, active=5)`" in f.action and "host-bound" in f.action
    b = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    (g,) = [x for x in findings(b) if x.id == "cold_capture"]
    assert g.evidence.text == f.evidence.text and g.action == f.action


@pytest.mark.parametrize("steps", [[1009], [3]])
def test_a_late_step_is_no_first_step(tmp_path, steps):
    """ProfilerStep#1009 (or #3: past a schedule's wait and warm-up) with the same 5 ms launch call: not one of the
    profiler's first three steps, so nothing says the process is cold."""
    assert _cold(tmp_path, cold_first=True, steps=steps, stub=True)[1] == []


def test_a_warm_step_among_the_first_is_steady(tmp_path):
    """#0 cold, #1 and #2 warm: two steps pay no one-time cost."""
    assert _cold(tmp_path, cold_first=True, steps=[0, 1, 2], stub=False)[1] == []
