"""graph_replay_idle and ddp_grad_copy on generated single-rank traces (answers by construction).

Graph: per 10-ms step a 10-us kernel at 0 (launched at 0), then `cudaGraphLaunch` at 20 us whose two recorded nodes
(its correlation id) run 500 us each at 2,050 and 6,550 us: the replay is ready at 20 us (launch call; the stream free
since 10 us), idle inside it 2,030 us before the first node and 4,000 between the nodes: 6.03 ms per step, 2.03 before
the first node. The twin's nodes run back to back from 50 us (30 us of idle, under the 1-ms stretch floor): silent.

DDP: per step 100 `torch.distributed.ddp.reducer::copy_bucket_to_grad` ops of 58 us, 60 us apart, each launching a
4-us DtoD copy at +20 us: 5.40 ms of idle inside them and 0.40 ms of copies: 5.80 ms per step. The twin's ops are
`aten::div_` (bucket views): silent."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

STEP = 10_000


def _graph(path, gaps: bool) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        b.kernel("fill_kernel", t, 10, launch_at=t)
        b.kernel("triton_poi_fused_0", t + (2050 if gaps else 50), 500, launch=False)
        c = b._corr
        b.raw({"ph": "X", "cat": "kernel", "name": "triton_poi_fused_1", "pid": b.device, "tid": 7,
               "ts": b._abs(t + (6550 if gaps else 550)), "dur": 500,
               "args": {"device": b.device, "stream": 7, "correlation": c, "External id": b._ext}})
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": b.pid, "tid": 1,
               "ts": b._abs(t + 20), "dur": 20, "args": {"correlation": c, "External id": b._ext}})
        b.kernel("fill_kernel", t + 9000, 10, launch_at=t + 8990)
    b.write(path)


def _ddp(path, views: bool) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        b.cpu_op("DistributedDataParallel.forward", t + 1, 50)
        for i in range(100):
            at = t + 100 + 60 * i
            b.cpu_op("aten::div_" if views else "torch.distributed.ddp.reducer::copy_bucket_to_grad", at, 58)
            b.kernel("Memcpy DtoD (Device -> Device)", at + 20, 4, launch_at=at + 10,
                     cat="kernel" if views else "gpu_memcpy")
        b.kernel("fill_kernel", t + 9000, 10, launch_at=t + 8990)
    b.write(path)


def _by(d):
    return {f.id: f for f in analyze_path(str(d), jobs=1).findings}


def test_graph_replay_idle_fires_with_the_idle_inside_the_replay(tmp_path):
    _graph(tmp_path / "g" / "rank0.json", gaps=True)
    f = _by(tmp_path / "g")["graph_replay_idle"]
    assert f.gain_ms == pytest.approx(6.03, abs=1e-6) and f.gain_kind == "bound" and f.severity == "high"
    assert "2.03 ms of it before a replay's first recorded node" in f.evidence.text
    assert "does not show what the replays waited on" in f.evidence.text and "cuda-graph-trace=node" in f.action


def test_graph_replay_idle_is_silent_when_the_nodes_run_back_to_back(tmp_path):
    _graph(tmp_path / "t" / "rank0.json", gaps=False)
    assert "graph_replay_idle" not in _by(tmp_path / "t")


def test_ddp_grad_copy_fires_on_copy_bucket_to_grad(tmp_path):
    _ddp(tmp_path / "d" / "rank0.json", views=False)
    f = _by(tmp_path / "d")["ddp_grad_copy"]
    assert f.gain_ms == pytest.approx(5.8, abs=1e-6) and f.gain_kind == "bound"
    assert "100 `torch.distributed.ddp.reducer::copy_bucket_to_grad` ops per step" in f.evidence.text
    assert "gradient_as_bucket_view=True" in f.action


def test_ddp_grad_copy_is_silent_with_bucket_views(tmp_path):
    _ddp(tmp_path / "v" / "rank0.json", views=True)
    assert "ddp_grad_copy" not in _by(tmp_path / "v")
