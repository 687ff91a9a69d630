"""What the critical path reads as a wait: a device op waiting on another stream's op (a stream-event wait) and a
host thread waking from a long idle gap (an unrecorded synchronize, a hand-over between threads), each with a twin
where the times say it was not a wait. Answers worked out by hand in each docstring from the times placed (µs).

The tolerances come from the real traces (critical_path/graph.py's WAIT_TOL_NS, resume.py's): device-side event
waits 1-21 µs typically, 54-97 µs for a memset / elementwise kernel behind a copy or a SendRecv on another stream
(hta a100_16rank_alltoall rank 0, trace_diff test.json: 66 µs after a SendRecv); a host thread waking 50 µs after
the kernel it waited on (torchrec sst_long_a2a_optimizer_3 rank 2), 181-462 µs after the thread that handed it the
work went idle (the same trace; hta trace_diff control.json's autograd thread).
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder

OTHER_TID = 200  # a second host thread (the autograd engine's, say)


def _metrics(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _a2a_then_compute(k2_launch: int) -> TraceBuilder:
    """K1 (stream 7) 100-200; an all-to-all (stream 20, launched at 20) 200-600 right behind it; K2 (stream 7)
    680-900, launched at `k2_launch`; aten::op 0-30 and aten::relu 640-700 on the main thread."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::op", 0, 30)
    b.kernel("K1", 100, 100, stream=7, launch_at=10)
    b.nccl("alltoall", 200, 400, stream=20, nelems=1 << 20, launch_at=20)
    b.cpu_op("aten::relu", 640, 60)
    b.kernel("K2", 680, 220, stream=7, launch_at=k2_launch)
    return b


def test_compute_waiting_80us_after_all_to_all_puts_it_on_the_path(tmp_path):
    """K2 was launched at 30, before the all-to-all began, on stream 7 idle since K1 ended at 200, yet began at
    680, 80 µs after the all-to-all (another stream) ended at 600: it waited on it. Window [100, 900] back from
    K2's end: K2 680-900 (compute 220), the wait 600-680 (event wait 80, kernel-kernel overhead), the all-to-all
    200-600 (communication 400), which began as K1 ended (its own wait, 0), K1 100-200 (compute 100). 800 µs:
    compute 320 = 40 %, communication 400 = 50 %, kernel-kernel 80 = 10 %."""
    cp = _metrics(tmp_path, _a2a_then_compute(30)).steps[0].critical_path
    assert cp is not None
    assert cp.length_ms == pytest.approx(0.8)
    assert cp.gpu_communication_bound == pytest.approx(50.0)
    assert cp.gpu_compute_bound == pytest.approx(40.0)
    assert cp.gpu_kernel_kernel_overhead == pytest.approx(10.0)
    assert cp.cpu_bound == 0 and cp.gpu_kernel_launch_overhead == 0


def test_compute_launched_after_the_all_to_all_is_launch_bound_not_a_wait(tmp_path):
    """The twin: K2 launched at 650, 50 µs after the all-to-all ended; it could not begin before its launch, so
    the all-to-all is no cause. Back from K2's end: K2 680-900 (compute 220), its launch 650-680 (launch delay
    30), aten::relu 640-650 (host op 10), the thread idle since aten::op ended at 30, from the window's start at
    100 (host gap 540). 800 µs: compute 220 = 27.5 %, cpu 550 = 68.75 %, launch 30 = 3.75 %, no communication."""
    m = _metrics(tmp_path, _a2a_then_compute(650))
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(0.8)
    assert cp.gpu_communication_bound == 0
    assert cp.gpu_compute_bound == pytest.approx(27.5, abs=0.05)
    assert cp.cpu_bound == pytest.approx(68.75, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(3.75, abs=0.05)
    assert m.critical_path.causes["host_gap"] == pytest.approx(100 * 540 / 800, abs=0.05)


def _idle_then_relu(relu_at: int) -> TraceBuilder:
    """aten::op 0-30 launches K1 (stream 7) at 10, which runs 100-2000; the main thread records nothing until
    aten::relu at `relu_at` (60 µs), which launches K2 10 µs in; K2 runs 140 µs from 10 µs after its launch."""
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.cpu_op("aten::op", 0, 30)
    b.kernel("K1", 100, 1900, stream=7, launch_at=10)
    b.cpu_op("aten::relu", relu_at, 60)
    b.kernel("K2", relu_at + 20, 140, stream=7, launch_at=relu_at + 10)
    return b


def test_thread_waking_right_after_a_kernel_waited_on_it(tmp_path):
    """The main thread idle 30-2040 (2.01 ms, nothing recorded) wakes 40 µs after K1 ended at 2000: it waited on
    K1 (an unrecorded synchronize). Window [100, 2200] back from K2's end: K2 2060-2200 (compute 140), its launch
    2050-2060 (launch delay 10), aten::relu 2040-2050 (host op 10), the wake-up 2000-2040 (synchronize 40), K1
    100-2000 (compute 1900). 2100 µs: compute 2040, cpu 50, launch 10."""
    m = _metrics(tmp_path, _idle_then_relu(2040))
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(2.1)
    assert cp.gpu_compute_bound == pytest.approx(100 * 2040 / 2100, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 50 / 2100, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 2100, abs=0.05)
    assert m.critical_path.causes["synchronize"] == pytest.approx(100 * 40 / 2100, abs=0.05)
    assert m.critical_path.causes["host_gap"] == 0


def test_thread_waking_long_after_a_kernel_is_host_bound(tmp_path):
    """The twin: the thread wakes at 2300, 300 µs after K1 ended: beyond a synchronize's return, so the gap is
    the host's. Window [100, 2460]: K2 2320-2460 (compute 140), launch 2310-2320 (10), aten::relu 2300-2310
    (host op 10), the idle thread 100-2300 (host gap 2200). 2360 µs: compute 140, cpu 2210, launch 10."""
    m = _metrics(tmp_path, _idle_then_relu(2300))
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(2.36)
    assert cp.gpu_compute_bound == pytest.approx(100 * 140 / 2360, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 2210 / 2360, abs=0.05)
    assert m.critical_path.causes["host_gap"] == pytest.approx(100 * 2200 / 2360, abs=0.05)
    assert m.critical_path.causes["synchronize"] == 0


def _hand_over(main_busy_through: bool, earlier_op: bool = True) -> TraceBuilder:
    """Main thread: aten::A 0-1500 launches K1 (stream 7, 20-100) at 10; then either nothing more (it went idle
    at 1500, as loss.backward() does once it woke the autograd thread) or aten::B 1550-2500 (busy through).
    Thread 200: aten::x 0-5 (unless not `earlier_op`: its first point is then the next), idle, then
    autograd::engine::evaluate_function 1700-1800 launching K2 at 1750 (stream 7, 1760-1900)."""
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.cpu_op("aten::A", 0, 1500)
    b.kernel("K1", 20, 80, stream=7, launch_at=10)
    if main_busy_through:
        b.cpu_op("aten::B", 1550, 950)
    if earlier_op:
        b.cpu_op("aten::x", 0, 5, tid=OTHER_TID)
    b.cpu_op("autograd::engine::evaluate_function: MulBackward0", 1700, 100, tid=OTHER_TID)
    b.kernel("K2", 1760, 140, stream=7, launch_at=1750, tid=OTHER_TID)
    return b


@pytest.mark.parametrize("earlier_op", [True, False])
def test_thread_woken_by_another_that_went_idle(tmp_path, earlier_op):
    """Thread 200, idle 5-1700 (1.695 ms; or nothing recorded before 1700: its first point), wakes 200 µs after the main thread went idle at 1500 (its next point is
    none): the main thread handed it the work. Window [20, 1900] back from K2's end: K2 1760-1900 (compute 140),
    launch 1750-1760 (10), evaluate_function 1700-1750 (host op 50), the hand-over 1500-1700 (host gap 200),
    aten::A from the window's start 20 to 1500 (host op 1480; its launch at 10 is before the window). 1880 µs:
    host op 1530, host gap 200, compute 140, launch 10."""
    m = _metrics(tmp_path, _hand_over(False, earlier_op))
    cp, causes = m.steps[0].critical_path, m.critical_path.causes
    assert cp.length_ms == pytest.approx(1.88)
    assert causes["host_op"] == pytest.approx(100 * 1530 / 1880, abs=0.05)
    assert causes["host_gap"] == pytest.approx(100 * 200 / 1880, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 140 / 1880, abs=0.05)


@pytest.mark.parametrize("poller", [False, True])
def test_thread_waking_while_the_other_stays_busy_is_no_hand_over(tmp_path, poller):
    """The twin: the main thread is in aten::B 1550-2500 when thread 200 wakes (it went idle nowhere near 1700),
    so nothing hands over: thread 200's own idle time, from the window's start 20 to 1700, is a host gap (1680),
    evaluate_function 1700-1750 host op 50, launch 10, K2 compute 140. 1880 µs. With `poller`, a thread that never
    launches device work (a pin-memory poller's) records cudaPointerGetAttributes 1600-1650 and nothing after,
    50 µs before the wake-up: it drives nothing, so it hands nothing over either."""
    b = _hand_over(True)
    if poller:
        b.cpu_op("cudaPointerGetAttributes", 1600, 50, tid=300, cat="cuda_runtime")
    m = _metrics(tmp_path, b)
    cp, causes = m.steps[0].critical_path, m.critical_path.causes
    assert cp.length_ms == pytest.approx(1.88)
    assert causes["host_gap"] == pytest.approx(100 * 1680 / 1880, abs=0.05)
    assert causes["host_op"] == pytest.approx(100 * 50 / 1880, abs=0.05)
