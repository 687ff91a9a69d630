"""Idle attribution (metrics/rank/idle.py) on built traces whose answer is placed by hand, and the CPU pipeline's
blocked recv counted as bubble, not exposed communication (issue 14 item 4)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.rules import findings
from tests.gen.builder import TraceBuilder, cpu_rank


def _one(tmp_path, b: TraceBuilder, rules: bool = False):
    return analyze_path(b.write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1, rules=rules)


def _gpu_step(b: TraceBuilder, k: int, k0: int) -> None:
    """Step k, window [k0+100, k0+1000] on the device (900 µs), 500 µs of kernels, idle placed as:
    [k0+200, k0+300] under aten::item (whose cudaStreamSynchronize is nested in it),
    [k0+300, k0+450] inside hipFree, [k0+500, k0+600] under a plain host op (host-bound), each ended by a kernel
    launched inside the gap; [k0+650, k0+700] ended by a kernel launched long before (queued: a dependency)."""
    b.step(k, k0, k0 + 1000)
    b.kernel("gemm_a", k0 + 100, 100, launch_at=k0 + 5)  # [100, 200]
    b.cpu_op("aten::item", k0 + 200, 100)
    b.cpu_op("aten::_local_scalar_dense", k0 + 201, 98)
    b.cpu_op("cudaStreamSynchronize", k0 + 210, 90, cat="cuda_runtime")
    b.cpu_op("hipFree", k0 + 300, 150, cat="cuda_runtime")
    b.kernel("gemm_b", k0 + 450, 50, launch_at=k0 + 449)  # [450, 500]
    b.cpu_op("aten::add", k0 + 500, 100)
    b.kernel("gemm_c", k0 + 600, 50, launch_at=k0 + 599)  # [600, 650]
    b.kernel("gemm_d", k0 + 700, 300, launch_at=k0 + 8)  # [700, 1000]


def test_idle_split_by_host_activity(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    for k in (1, 2):
        _gpu_step(b, k, (k - 1) * 1000)
    r = _one(tmp_path, b).ranks[0]
    i = r.idle
    assert i is not None and r.idle_ms == pytest.approx(0.4)
    assert i.idle_ms == pytest.approx(0.4)
    assert i.runtime_ops["aten::item"] == pytest.approx(0.1)  # the user-level op, not its nested sync
    assert i.runtime_ops["hipFree"] == pytest.approx(0.15)
    assert i.runtime_ms == pytest.approx(0.25) and i.host_bound_ms == pytest.approx(0.1)
    assert i.queued_ms == pytest.approx(0.05) and i.unattributed_ms == 0 and i.edge_ms == 0
    assert i.runtime_calls["aten::item"] == 1 and i.runtime_calls["hipFree"] == 1
    parts = (i.edge_ms + i.queued_ms + i.runtime_ms + i.dataloader_ms + i.comm_wait_ms + i.host_bound_ms
             + i.unattributed_ms)
    assert parts == pytest.approx(i.idle_ms)


def test_idle_intervals_are_the_hand_placed_gaps(tmp_path):
    """The attribution's intervals (what the timeline's idle track draws and the breakdown sums), in ns on the
    trace's own clock: each hand-placed gap under its own cause, and nothing else."""
    from llmdiag.diagnose.io.loader import load_trace
    from llmdiag.diagnose.metrics.rank.classify import classify
    from llmdiag.diagnose.metrics.rank.idle import idle_intervals
    from llmdiag.diagnose.metrics.rank.steps import windows

    b = TraceBuilder(rank=0, world_size=1)
    for k in (1, 2):
        _gpu_step(b, k, (k - 1) * 1000)
    t = load_trace(b.write(tmp_path / "rank0.json"))
    classify(t)
    wins, _ = windows(t)
    steps = idle_intervals(t, wins)
    assert [s.step for s in steps] == [1, 2]
    for s in steps:
        k0 = next(w.host_start for w in wins if w.step == s.step)  # the ProfilerStep's start: k0
        got = [(c, op, [(int(a) - k0, int(e) - k0) for a, e in zip(*u)]) for c, op, u in s.parts]
        assert got == [("queued", "", [(650_000, 700_000)]), ("runtime", "aten::item", [(200_000, 300_000)]),
                       ("runtime", "hipFree", [(300_000, 450_000)]), ("host_bound", "", [(500_000, 600_000)])]
        assert [(int(a) - k0, int(e) - k0) for a, e in zip(*s.idle)] == [(200_000, 450_000), (500_000, 600_000),
                                                                          (650_000, 700_000)]


def test_capture_edge_is_not_host_bound(tmp_path):
    """No ProfilerStep: a 493 µs host-only lead-in before the first kernel is the capture's edge, never idle,
    host-bound time or a finding's gain."""
    b = TraceBuilder(rank=0, world_size=1)
    b.cpu_op("aten::to", 0, 493)
    b.kernel("gemm", 500, 400, launch_at=495)
    r = _one(tmp_path, b).ranks[0]
    assert r.idle.host_bound_ms == 0 and r.idle_ms == 0 and r.step_time_ms == pytest.approx(0.4)


def test_training_evidence(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    b.kernel("gemm", 100, 100, launch_at=10)
    b.cpu_op("autograd::engine::evaluate_function: MmBackward0", 300, 50)
    b.cpu_op("Optimizer.step#AdamW.step", 400, 50)
    b.cpu_op("DistributedDataParallel.forward", 20, 50)
    t = _one(tmp_path, b).ranks[0].training
    assert t.training and t.backward_ops == 1 and t.optimizer_ops == 1 and t.ddp_ops == 1


def test_cpu_pipeline_recv_is_bubble_not_exposed_comm(tmp_path):
    """Per step: aten::mm [100, 400], blocked in gloo:recv [405, 805] waiting on the previous stage, aten::mm
    [805, 905], gloo:send [850, 970]. Compute 400, exposed comm 0 (p2p waits are the bubble), idle 600 of the
    1000 µs step. On an own pp2 CPU run (1F1B, m=4) this took stage 0 from exposed 16.3 % / idle 10.6 % against
    a 24.2 % bubble to exposed 0 / idle 26.8 %: idle now holds the bubble, as the glossary says."""
    b = cpu_rank(rank=1, world_size=2, steps=0)
    for k in (1, 2):
        k0 = (k - 1) * 1000
        b.step(k, k0, k0 + 1000)
        b.cpu_op("aten::mm", k0 + 100, 300)
        b.cpu_op("c10d::recv", k0 + 400, 5)
        b.gloo("recv", k0 + 405, 400, dims=[1024])
        b.cpu_op("aten::mm", k0 + 805, 100)
        b.gloo("send", k0 + 850, 120, dims=[1024])  # 50 µs under compute, 70 waiting for the peer's recv
    r = _one(tmp_path, b).ranks[0]
    assert r.compute_ms == pytest.approx(0.4)
    assert r.exposed_comm_ms == 0 and r.comm_ms == 0
    assert r.idle_ms == pytest.approx(0.6)
    assert {"recv", "send"} <= {c.kind for c in r.comm_by_kind}  # still listed per op


def test_hipfree_idle_gets_a_finding(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    for k in (1, 2):
        _gpu_step(b, k, (k - 1) * 1000)
    fs = findings(_one(tmp_path, b))
    ids = [f.id for f in fs]
    assert "allocator_churn" in ids and "host_sync" in ids
    f = next(f for f in fs if f.id == "allocator_churn")
    assert f.gain_ms == pytest.approx(0.15) and "hipFree" in f.evidence.text and f.gain_kind == "bound"


def test_device_word_follows_the_trace(tmp_path):
    """Issue 28 item 4: an MTIA trace whose deviceProperties name no device (its runtime events are `mtia_runtime`)
    is called a device, never a GPU; a CPU-only trace's wording says CPU; ROCm and CUDA GPUs stay GPUs."""
    from llmdiag.diagnose.model.devices import device_from_categories, device_word
    from llmdiag.diagnose.rules.base import Ctx
    from tests.gen.blocking import host_op

    b = host_op(21_000)
    for e in b.events:
        if e.get("cat") == "cuda_runtime":
            e["cat"] = "mtia_runtime"
    a = analyze_path(b.write(tmp_path / "mtia" / "rank0.pt.trace.json.gz"), jobs=1)
    assert a.ranks[0].device == "MTIA"
    f = next(f for f in a.findings if f.id == "host_op_stall")
    assert f.title.startswith("Device idle") and "GPU" not in f.title + f.evidence.text + f.action
    assert Ctx(_one(tmp_path, cpu_rank(rank=0, world_size=1))).dev == "CPU"
    assert device_word("AMD Instinct MI300X", "gpu") == "GPU" and device_word("MTIA v2", "gpu") == "device"
    assert device_from_categories(["cpu_op", "cuda_runtime", "kernel"]) == ""


def test_idle_table_in_terminal_and_report(tmp_path):
    """Issue 28 item 8: the idle split is a table of its own, the same row in the terminal and the report: the
    hand-placed answer of `_gpu_step` (idle 0.40 = queued 0.05 + runtime 0.25 + host 0.10 ms per step)."""
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.context import idle_view

    b = TraceBuilder(rank=0, world_size=1)
    for k in (1, 2):
        _gpu_step(b, k, (k - 1) * 1000)
    a = _one(tmp_path, b, rules=True)
    text = render(a)
    block = text[text.index("Device idle by cause per rank"):]
    row = next(line for line in block.splitlines() if line.startswith("0 "))
    assert row.split()[:9] == ["0", "0.40", "0.00", "0.05", "0.25", "0.00", "0.00", "0.10", "0.00"]
    assert "hipFree 0.15" in row
    v = idle_view(a)
    assert [str(x) for x in v["rows"][0]["parts"]] == ["0.00", "0.05", "0.25", "0.00", "0.00", "0.10", "0.00"]
    assert v["rows"][0]["parts"][2].k == "ranks.0.idle.runtime_ms"


def test_gap_ended_by_an_unlaunched_kernel_is_unattributed(tmp_path):
    """A gap whose ending kernel's launch is not in the trace (no host event carries its correlation) is not the
    host op's that overlaps it: unattributed. The twin, the same kernel with its launch inside the gap, is
    host-bound. Each step also has two launched kernels, so the trace records most launches."""
    def trace(launch: bool) -> TraceBuilder:
        b = TraceBuilder(rank=0, world_size=1)
        for k in (1, 2):
            k0 = (k - 1) * 1000
            b.step(k, k0, k0 + 1000)
            b.kernel("gemm_a", k0 + 100, 100, launch_at=k0 + 5)
            b.cpu_op("aten::add", k0 + 200, 300)
            b.kernel("gemm_b", k0 + 500, 100, launch_at=k0 + 499, launch=launch)  # gap [200, 500]
            b.kernel("gemm_c", k0 + 600, 100, launch_at=k0 + 6)
        return b

    i = _one(tmp_path / "missing", trace(False)).ranks[0].idle
    assert i.unattributed_ms == pytest.approx(0.3) and i.host_bound_ms == 0
    i = _one(tmp_path / "launched", trace(True)).ranks[0].idle
    assert i.host_bound_ms == pytest.approx(0.3) and i.unattributed_ms == 0
