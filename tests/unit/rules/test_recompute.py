"""The activation_recompute rule (rules/recompute.py, metrics/rank/recompute.py): non-reentrant torch.utils.checkpoint
runs a segment's forward again inside backward, in a `torch/utils/checkpoint.py(1500): recompute_fn` Python span.

Generated steps of 10 ms (answers by construction): inside the span (100-700 µs) four host ops launch (at 110, 210,
310, 410 µs) four 1,000-µs kernels that run back to back from 200 to 4,200 µs; an all-reduce runs 3,200-5,200 µs on
its own stream, launched inside the span at 600 µs
(a collective: not counted as recomputed forward). Recomputed device time 4 × 1,000 = 4.000 ms per step, 1.000 ms of it beside the all-reduce
(3,200-4,200), so 3.000 ms with no collective running: the gain bound. Memory: an 80 GB device holding 10 GB (12.5 %,
room: the "checkpoint fewer layers" action), 60 GB (75 %: no finding, checkpointing may be what lets it run), or no
`[memory]` events (the headroom unread: the finding says so). Twin: the same ops and kernels with no checkpoint span."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

STEP = 10_000
GB = 10**9


def _trace(path, kind: str) -> None:
    b = TraceBuilder(rank=0, world_size=2, device_properties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                                               "totalGlobalMem": 80 * GB}])
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        if kind != "plain":
            b.cpu_op("torch/utils/checkpoint.py(1500): recompute_fn", t + 100, 600, cat="python_function")
        for k in range(4):
            b.cpu_op("aten::convolution", t + 105 + 100 * k, 50)
            b.kernel("sm90_xmma_fprop_implicit_gemm_bf16", t + 200 + 1000 * k, 1000, launch_at=t + 110 + 100 * k)
        b.nccl("allreduce", t + 3200, 2000, nelems=1 << 20, launch_at=t + 600)
        if kind in ("room", "full"):
            b.memory(t + 50, (10 if kind == "room" else 60) * GB, (10 if kind == "room" else 60) * GB)
    d = path / "job"
    d.mkdir()
    b.write(d / "rank0.json")
    return d


def _analyze(tmp_path, kind: str):
    a = analyze_path(str(_trace(tmp_path, kind)), jobs=1)
    return a, {f.id: f for f in a.findings}


def test_recompute_measured_and_memory_unread_said(tmp_path):
    a, got = _analyze(tmp_path, "unread")
    r = a.ranks[0].recompute
    assert r is not None and r.spans == 1 and r.kernels == 4
    assert r.device_ms == pytest.approx(4.0, abs=1e-6) and r.comm_overlap_ms == pytest.approx(1.0, abs=1e-6)
    f = got["activation_recompute"]
    assert f.gain_ms == pytest.approx(3.0, abs=1e-6) and f.gain_kind == "bound"
    assert "not read" in f.evidence.text and "max_memory_allocated" in f.action


def test_room_gives_the_turn_off_action(tmp_path):
    _, got = _analyze(tmp_path, "room")
    f = got["activation_recompute"]
    assert "12.5%" in f.evidence.text and f.action.startswith("checkpoint fewer layers")


@pytest.mark.parametrize("kind", ["full", "plain"])
def test_silent_near_capacity_or_without_checkpoint(tmp_path, kind):
    a, got = _analyze(tmp_path, kind)
    assert "activation_recompute" not in got
    assert (a.ranks[0].recompute is None) == (kind == "plain")
