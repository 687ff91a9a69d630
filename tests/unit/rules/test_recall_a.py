"""Issue #34 recall on the recommendation-system class (tests/expert/planted_recall_a.py holds the corpus cases):
the metrics the new findings read, to the planted value, and their round trip through the summary."""

from __future__ import annotations

import json

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.analysis import Analysis
from tests.expert import planted


def _run(tmp_path, **knobs):
    planted.write(planted.Knobs(**knobs), str(tmp_path))
    return analyze_path(str(tmp_path), jobs=1)


def _one(a, rid):
    return next((f for f in a.findings if f.id == rid), None)


def test_codec_cost_is_the_kernels_inside_its_ranges(tmp_path):
    """A 6 ms encode cast and a 3 ms decode cast per step inside TorchRec's ranges: exactly 6 and 3 ms per step on
    every rank; against its 2.5 ms all_to_all, which fp32 would at most double, the codec costs 9 − 2.5 = 6.5 ms per
    step more than it saves ("comm_codec" fires, estimate); the same casts outside the ranges are no codec, and a
    1 + 0.5 ms codec pays for itself (silent)."""
    a = _run(tmp_path / "codec", qcomm_ms=6.0)
    for r in a.ranks:
        cc = r.comm_codec
        assert cc.precision == "fp16" and cc.calls_per_step == 2.0
        assert cc.encode_ms_per_step == pytest.approx(6.0, abs=1e-6)
        assert cc.decode_ms_per_step == pytest.approx(3.0, abs=1e-6)
    f = _one(a, "comm_codec")
    assert f is not None and f.gain_kind == "estimate" and f.gain_ms == pytest.approx(6.5, abs=1e-6)
    assert "{" not in f.evidence.text and "(1.0 kernels per step" in f.evidence.text
    assert all(r.comm_codec.wire_bytes_bound_ms_per_step == pytest.approx(2.5, abs=1e-6) for r in a.ranks)
    assert _one(_run(tmp_path / "pays", qcomm_ms=1.0), "comm_codec") is None
    b = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert b.ranks[0].comm_codec == a.ranks[0].comm_codec
    twin = _run(tmp_path / "twin", qcomm_ms=6.0, qcomm_annotated=False)
    assert all(r.comm_codec is None for r in twin.ranks) and _one(twin, "comm_codec") is None


def test_stall_in_the_region_before_the_forward_collective(tmp_path):
    """Rank 2 stalls 30 ms inside `# running sparse arch` right before its forward all_to_all op: 30.00 ms per step,
    named; its peers 0; the same region with no stall gives 0 everywhere."""
    a = _run(tmp_path / "stall", stall_rank=2, stall_ms=30.0, region_stall=True)
    st = {r.rank: r.comm_host_stall for r in a.ranks}
    assert st[2].ms_per_step == pytest.approx(30.0, abs=1e-3) and st[2].op == "# running sparse arch"
    assert all(st[r].ms_per_step == 0 for r in (0, 1, 3))
    twin = _run(tmp_path / "twin", region_stall=True)
    assert all(r.comm_host_stall.ms_per_step == 0 for r in twin.ranks)


def test_flush_fires_against_its_own_step(tmp_path):
    """8 cudaFree + 9 cudaMalloc (60 ms of idle) in step #12 of 5 steps that rank 2's 250 ms stall makes ~360 ms
    long: 12 ms per step, under 5 % of the mean step, 14 % of its own: the flush is named, its gain the mean."""
    f = _one(_run(tmp_path, flush_step=2, flush_frees=8, stall_rank=2, stall_ms=250.0), "allocator_churn")
    assert f is not None and f.evidence.steps == [12] and "mid-capture" in f.evidence.text
    assert f.gain_ms == pytest.approx(60.0 / 5, abs=1e-3)
