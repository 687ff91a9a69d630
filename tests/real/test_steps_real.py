"""Steps: host ProfilerStep spans define steps; GPU-side step annotations are never merged into them;
device windows never overlap; --hta-compat drops the last step without folding it; traces without steps
are one window over the device activity. Pinned on real fixtures and generated traces."""

from __future__ import annotations

import gzip
import json

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

REAL = "../shared/fixtures/real"
MI300 = f"{REAL}/tracelens/mi300_ddp8_actckpt_rank0.json.gz"


def _independent_windows(path: str) -> dict[int, tuple[float, float]]:
    """Per host ProfilerStep: [first start, last end] (µs) of the device events whose launch (same
    correlation) lies in the host span; each clipped at the next step's first start. Plain JSON walk."""
    ev = json.load(gzip.open(path))["traceEvents"]
    steps = sorted((int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in ev
                   if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#"))
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    win = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X":
            t = launch.get(e.get("args", {}).get("correlation"))
            for n, s, end in steps:
                if t is not None and s <= t <= end:
                    lo, hi = win.get(n, (float("inf"), float("-inf")))
                    win[n] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    ns = sorted(win)
    for a, b in zip(ns, ns[1:]):
        win[a] = (win[a][0], min(win[a][1], win[b][0]))
    return win


@pytest.mark.real
def test_mi300_gpu_side_profiler_steps_are_not_merged():
    """ROCm trace with ProfilerStep#15-17 on the host and as gpu_user_annotation markers on the device
    (#15's marker lies inside host step #17). Steps were stretched over their successors."""
    win = _independent_windows(MI300)
    (m,) = analyze_path(MI300, rules=False, jobs=1).ranks
    assert [s.step for s in m.steps] == [15, 16, 17]
    for s in m.steps:
        lo, hi = win[s.step]
        assert s.time_ms == pytest.approx((hi - lo) / 1e3, abs=1e-3)
        assert 18 < s.time_ms < 20  # not the 37.5 ms of two steps folded together
        assert 11 < s.exposed_comm_ms < 12.5  # the issue's ~11.9 ms per step, not 17.6


@pytest.mark.real
def test_mi300_hta_compat_drops_the_last_step_without_folding():
    (full,) = analyze_path(MI300, rules=False, jobs=1).ranks
    (compat,) = analyze_path(MI300, rules=False, jobs=1, exclude_last_step=True).ranks
    assert [s.step for s in compat.steps] == [15, 16]
    assert [s.time_ms for s in compat.steps] == [s.time_ms for s in full.steps[:2]]
    assert [s.exposed_comm_ms for s in compat.steps] == [s.exposed_comm_ms for s in full.steps[:2]]


@pytest.mark.real
@pytest.mark.parametrize("name,hta", [("test", 68.80), ("control", 47.03)])
def test_trace_diff_within_one_point_of_hta(name, hta):
    """HTA 0.5's own numbers (fixtures README). The 5.4-point gap on `test` came from device windows that
    overlapped (comm kernels of step N queued past step N+1's first kernel): the same time counted twice.
    The 0.87 point left is named in docs/metrics.md (time attributed by when it runs, not by who launched it)."""
    (m,) = analyze_path(f"{REAL}/hta/trace_diff/{name}.json.gz", rules=False, jobs=1, exclude_last_step=True).ranks
    assert abs(100 * m.overlap_ratio - hta) <= 1.0
    windows = [(s.start_ms, s.start_ms + s.time_ms) for s in m.steps]
    assert all(a[1] <= b[0] + 1e-9 for a, b in zip(windows, windows[1:]))  # a partition: no time counted twice


def _run(tmp_path, b, **kw):
    d = tmp_path / "run"
    b.write(d / "rank0.json")
    (m,) = analyze_path(str(d), rules=False, jobs=1, **kw).ranks
    return m


def test_generated_gpu_step_marker_and_overlapping_device_windows(tmp_path):
    """Host steps [0, 1000] and [1000, 2000]. Step 1: compute [100, 700], an all-reduce launched at 20
    running [900, 1300] (queued past step 2's first kernel at 1100). Step 2: compute [1100, 1600]. A GPU-side
    `ProfilerStep#1` marker at [1900, 1901] (as ROCm writes). Windows: step 1 [100, 1100] (clipped at 1100),
    step 2 [1100, 1600]; comm 200 µs in each; overlapped: step 1 0, step 2 200 (compute [1100, 1300])."""
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    b.kernel("void gemm_a()", 100, 600, launch_at=10)
    b.nccl("allreduce", 900, 400, launch_at=20, nelems=1024, group_size=2)
    b.kernel("void gemm_b()", 1100, 500, launch_at=1010)
    b.raw({"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7,
           "ts": b.base_us + 1900, "dur": 1, "args": {"External id": 1}})
    m = _run(tmp_path, b)
    assert [(s.step, s.start_ms, s.time_ms) for s in m.steps] == [(1, 0.1, 1.0), (2, 1.1, 0.5)]
    assert [s.comm_ms for s in m.steps] == [pytest.approx(0.2), pytest.approx(0.2)]
    assert [s.overlapped_comm_ms for s in m.steps] == [0.0, pytest.approx(0.2)]
    assert [s.idle_ms for s in m.steps] == [pytest.approx(0.2), 0.0]  # [700, 900] in step 1
    assert any("ran past the start of the next step" in w for w in m.warnings)
    compat = _run(tmp_path / "c", b, exclude_last_step=True)
    assert [(s.step, s.time_ms) for s in compat.steps] == [(1, 1.0)]  # dropped, not folded


def test_generated_trace_without_steps_starts_at_first_device_activity(tmp_path):
    """A 493 ms host-only hipMemcpyWithStream before the first kernel is not idle of the window."""
    b = TraceBuilder(rank=0, world_size=1)
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyWithStream", "pid": b.pid, "tid": 100,
           "ts": b.base_us, "dur": 493_000, "args": {}})
    b.kernel("void gemm()", 493_100, 400)
    b.kernel("void relu()", 493_600, 100)
    m = _run(tmp_path, b)
    (s,) = m.steps
    assert s.time_ms == pytest.approx(0.6) and s.compute_ms == pytest.approx(0.5) and s.idle_ms == pytest.approx(0.1)
    assert any("no ProfilerStep" in w and "first to the last GPU activity" in w for w in m.warnings)


@pytest.mark.real
def test_cross_check_names_communication_hta_cannot_see():
    """B200 fixture: HTA's communication is nccl* kernels only; the multimem all-reduce is named."""
    pytest.importorskip("hta")
    from llmdiag.diagnose.cli.hta_check import cross_check_hta

    a = analyze_path(f"{REAL}/tracelens/b200_vllm_tp8_rank0.json.gz", rules=False, jobs=1, exclude_last_step=True)
    text = cross_check_hta(a, exclude_last_step=True)
    assert "HTA counts only kernels named nccl*" in text and "multimem_all_reduce_kernel" in text
