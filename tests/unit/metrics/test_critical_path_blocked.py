"""A host blocked on the device is not what bounds the step: the critical path runs through the device work the
host waited on, in the ways real traces record that wait badly. Each case has a twin where the times say the host
(or another stream) really was the bound. Answers worked out by hand in each docstring from the times placed (µs;
launch calls last 1 µs unless said).

- a device clock behind the host's (CUPTI skew: torchrec V100 kernels beginning up to 50 µs before their launch):
  a synchronize must not be tied to an op launched after it began (a loop of binding edges), and a thread waking
  from a long wait is matched to the op it waited on within the lag (and 10 µs the other way: a device clock
  ahead of the host's);
- a host op silent for a long time that was really a wait on a collective (a straggler's peers);
- a synchronize nested improperly (its parent op ending 2 µs before it);
- a window clipped where the next step's device work begins, with the device mid-kernel and the host ahead;
- a stream that began its next op within one back-to-back gap is no event wait on another stream;
- a step with no device work (a ProfilerStep the capture stopped in) is left out of the rank's mean.
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder


def _metrics(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _call(b: TraceBuilder, name: str, dur: int) -> None:
    """The launch call just written by b.kernel/memcpy becomes `name` lasting `dur`."""
    b.events[-2].update(name=name, dur=dur)


def _skewed() -> TraceBuilder:
    """aten::A 0-20 launches K1 (stream 7, 100-1480) at 10; cudaStreamSynchronize 40-1505 (top level) waits on
    it; aten::copy_ 1515-1545 holds cudaMemcpyAsync 1518-1524, whose copy M ran 1488-1491 (device clock: 30 µs
    before its launch), and cudaStreamSynchronize 1526-1542; aten::add_ 1553-1589 holds cudaLaunchKernel
    1567-1583 of K2, which ran 1535-1538 (32 µs before its launch), inside that synchronize."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.cpu_op("aten::A", 0, 20)
    b.kernel("K1", 100, 1380, stream=7, launch_at=10)
    b.cpu_op("cudaStreamSynchronize", 40, 1465, cat="cuda_runtime")
    b.cpu_op("aten::copy_", 1515, 30)
    b.memcpy(1488, 3, stream=7, launch_at=1518)
    _call(b, "cudaMemcpyAsync", 6)
    b.cpu_op("cudaStreamSynchronize", 1526, 16, cat="cuda_runtime")
    b.cpu_op("aten::add_", 1553, 36)
    b.kernel("K2", 1535, 3, stream=7, launch_at=1567)
    _call(b, "cudaLaunchKernel", 16)
    return b


def test_synchronize_is_not_tied_to_an_op_launched_after_it(tmp_path):
    """K2 and M end inside the synchronizes but were launched after each began: neither is what it waited on.
    Window [100, 1538] back from K2's end: K2 1535-1538 (compute 3); its launch, add_ and copy_'s end all come
    later in host time (0 each); the second synchronize 1526-1535 (9; it waited on M, which ended before its
    begin had arrived); copy_ 1524-1526 (host op 2), cudaMemcpyAsync 1518-1524 (runtime 6), copy_ 1515-1518 (3),
    the gap 1505-1515 (10); the first synchronize's return after K1's end 1480-1505 (25; M ended later inside it,
    but was launched after it began), K1 100-1480 (1380). 1438 µs: compute 1383, cpu 55. Before, K2's end fed
    the synchronize, K2's launch came after it: a loop, walked until its budget ran out and counted as a host
    gap (cpu ~99 %)."""
    m = _metrics(tmp_path, _skewed())
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(1.438)
    assert cp.gpu_compute_bound == pytest.approx(100 * 1383 / 1438, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 55 / 1438, abs=0.05)
    assert m.critical_path.causes["synchronize"] == pytest.approx(100 * 34 / 1438, abs=0.05)
    assert m.critical_path.causes["host_gap"] == pytest.approx(100 * 10 / 1438, abs=0.05)


def _nested(sync_end: int) -> TraceBuilder:
    """aten::A 0-20 launches K1 (stream 7, 30-2900) at 10; aten::copy_ 100-2950 holds cudaStreamSynchronize
    110-`sync_end`; aten::B 2960-3000 launches K2 (stream 7, 2980-3100) at 2970."""
    b = TraceBuilder()
    b.step(1, 0, 4000)
    b.cpu_op("aten::A", 0, 20)
    b.kernel("K1", 30, 2870, stream=7, launch_at=10)
    b.cpu_op("aten::copy_", 100, 2850)
    b.cpu_op("cudaStreamSynchronize", 110, sync_end - 110, cat="cuda_runtime")
    b.cpu_op("aten::B", 2960, 40)
    b.kernel("K2", 2980, 120, stream=7, launch_at=2970)
    return b


@pytest.mark.parametrize("sync_end", [2952, 2948])
def test_synchronize_ending_after_its_parent_still_waits_on_the_device(tmp_path, sync_end):
    """The synchronize ends at 2952, 2 µs after its parent copy_ (a µs rounding of the profiler's); its twin ends
    at 2948, properly nested. Either way the thread waited on K1. Window [30, 3100] back from K2's end: K2
    2980-3100 (compute 120), its launch 2970-2980 (10), aten::B 2960-2970 (host op 10), the gap after the
    thread's last end (8); then 2 µs between the two ends (host op or synchronize), the return after K1's end
    2900-2950 (or 2900-2948, synchronize), K1 30-2900 (compute 2870). 3070 µs: compute 2990, cpu 70, launch 10.
    Before, the parent's end, first after the synchronize's begin, had only that begin to wait on: 2840 µs of
    synchronize, cpu ~96 %."""
    m = _metrics(tmp_path, _nested(sync_end))
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(3.07)
    assert cp.gpu_compute_bound == pytest.approx(100 * 2990 / 3070, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 70 / 3070, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 3070, abs=0.05)


def _woken(lag: bool) -> TraceBuilder:
    """aten::A 50-80 launches K0 (stream 9) at 60 and K1 (stream 7, 100-2000) at 70; K0 runs 10-20 with `lag`
    (device clock 50 µs behind the host's: it began before its launch), else 70-80. The thread records nothing
    until aten::B 2075-2135, 75 µs after K1 ended, which launches K2 (stream 7, 2150-2290) at 2085."""
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.cpu_op("aten::A", 50, 30)
    b.kernel("K0", 10 if lag else 70, 10, stream=9, launch_at=60)
    b.kernel("K1", 100, 1900, stream=7, launch_at=70)
    b.cpu_op("aten::B", 2075, 60)
    b.kernel("K2", 2150, 140, stream=7, launch_at=2085)
    return b


def test_wake_up_within_the_clock_lag_waited_on_the_device(tmp_path):
    """K0 began 50 µs before its launch: device timestamps lag the host's by at least that, so K1's end (2000 on
    the device clock) came at least 2050 in the host's, and the wake-up at 2075 is within a synchronize's return
    (60 µs) of it. Window [10, 2290] back from K2's end: K2 2150-2290 (compute 140), launch 2085-2150 (65),
    aten::B 2075-2085 (host op 10), the wait on K1 2000-2075 (synchronize 75), K1 100-2000 (1900), its launch
    70-100 (30), aten::A 61-70 (9), K0's launch 60-61 (runtime 1), aten::A 50-60 (10), the thread's first point
    with nothing before it 10-50 (host gap 40; K0 ended at 20 but was launched at 60, after). 2280 µs: compute
    2040, launch 95, cpu 145."""
    m = _metrics(tmp_path, _woken(True))
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(2.28)
    assert cp.gpu_compute_bound == pytest.approx(100 * 2040 / 2280, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 95 / 2280, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 145 / 2280, abs=0.05)
    assert m.critical_path.causes["synchronize"] == pytest.approx(100 * 75 / 2280, abs=0.05)


def test_wake_up_75us_after_without_lag_is_the_hosts(tmp_path):
    """The twin: K0 runs after its launch, the clocks agree, and 75 µs is beyond a synchronize's return: the
    thread's idle is its own, and K2 waited on it from K1's end. K1, ready at its launch (70), began 20 µs after K0
    ended on stream 9 (an event wait): it queued, the host was ahead, so the walk returns to the device where K2
    could have begun but for its launch (ahead.py). Window [70, 2290]: K2 140, launch 2085-2150 (65), aten::B
    2075-2085 (host op 10), the idle thread from K1's end 2000-2075 (host gap 75, not a synchronize), K1 100-2000
    (1900), its wait on K0 80-100 (event wait 20), K0 70-80 (10). 2220 µs: compute 2050, launch 65, cpu 85."""
    m = _metrics(tmp_path, _woken(False))
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(2.22)
    assert cp.cpu_bound == pytest.approx(100 * 85 / 2220, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 2050 / 2220, abs=0.05)
    assert m.critical_path.causes["host_gap"] == pytest.approx(100 * 75 / 2220, abs=0.05)
    assert m.critical_path.causes["synchronize"] == 0


def test_window_clipped_mid_kernel_is_the_kernels(tmp_path):
    """Step 1 (host 0-1000): aten::A launches K1 (stream 7, 50-1500) at 10. Step 2 (host 1000-2000): aten::B
    1000-1020 launches K2 (stream 8, 1030-1040) at 1010, aten::C 1100-1120 K3 (stream 7, 1500-1700) at 1110,
    aten::D 1200-1990. Step 1's window ends where step 2's device work begins, 1030, with K1 running: [50, 1030]
    is K1's (compute 980, 100 %), not the host's launch of step 2 and its idle before (before: cpu 98 %). Step 2,
    [1030, 1700]: K3 200, behind K1 on its stream 1030-1500 (470): compute 100 %. Rank: (980 + 670) / 2."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    b.cpu_op("aten::A", 0, 20)
    b.kernel("K1", 50, 1450, stream=7, launch_at=10)
    b.cpu_op("aten::B", 1000, 20)
    b.kernel("K2", 1030, 10, stream=8, launch_at=1010)
    b.cpu_op("aten::C", 1100, 20)
    b.kernel("K3", 1500, 200, stream=7, launch_at=1110)
    b.cpu_op("aten::D", 1200, 790)
    m = _metrics(tmp_path, b)
    one, two = (s.critical_path for s in m.steps)
    assert one.length_ms == pytest.approx(0.98) and one.gpu_compute_bound == 100.0 and one.cpu_bound == 0
    assert two.length_ms == pytest.approx(0.67) and two.gpu_compute_bound == 100.0
    assert m.critical_path.length_ms == pytest.approx(0.825)


def _interleaved(k2_start: int, x_end: int) -> TraceBuilder:
    """aten::A 0-40 launches K1 (stream 7, 100-500) at 10 and K2 (stream 7, `k2_start`, 396 µs) at 30; the thread
    idles until aten::H 460-480, which launches X (stream 14, 480-`x_end`) at 470."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.cpu_op("aten::A", 0, 40)
    b.kernel("K1", 100, 400, stream=7, launch_at=10)
    b.kernel("K2", k2_start, 396, stream=7, launch_at=30)
    b.cpu_op("aten::H", 460, 20)
    b.kernel("X", 480, x_end - 480, stream=14, launch_at=470)
    return b


def test_op_beginning_within_its_streams_own_gap_waited_on_no_other_stream(tmp_path):
    """K2, queued since 30, began 4 µs after K1 ended on its stream (a back-to-back gap), 1 µs after X ended on
    stream 14: chance, not an event wait. Window [100, 900]: K2 504-900 (396), the gap 500-504 (kernel-kernel
    4), K1 100-500 (400). 800 µs: compute 99.5 %, no cpu. Before, X's end bound K2 and the path went through X's
    late launch to the idle host (cpu 46 %)."""
    cp = _metrics(tmp_path, _interleaved(504, 503)).steps[0].critical_path
    assert cp.length_ms == pytest.approx(0.8)
    assert cp.gpu_compute_bound == pytest.approx(99.5)
    assert cp.gpu_kernel_kernel_overhead == pytest.approx(0.5)
    assert cp.cpu_bound == 0


def test_op_sitting_ready_until_another_streams_op_ends_waited_on_it(tmp_path):
    """The twin: K2 sat ready 80 µs (K1 ended at 500) and began at 580, 5 µs after X ended at 575: an event wait.
    Window [100, 976]: K2 580-976 (396), the wait 575-580 (event wait 5), X 480-575 (95), its launch 470-480
    (10), aten::H 460-470 (host op 10), the idle thread from the window's start 100 to 460 (host gap 360). 876 µs:
    compute 491, kernel-kernel 5, launch 10, cpu 370."""
    cp = _metrics(tmp_path, _interleaved(580, 575)).steps[0].critical_path
    assert cp.length_ms == pytest.approx(0.876)
    assert cp.gpu_compute_bound == pytest.approx(100 * 491 / 876, abs=0.05)
    assert cp.gpu_kernel_kernel_overhead == pytest.approx(100 * 5 / 876, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 370 / 876, abs=0.05)


@pytest.mark.parametrize("second_has_work", [False, True])
def test_step_without_device_work_is_left_out_of_the_rank_mean(tmp_path, second_has_work):
    """Step 1 (0-1000): aten::A launches K1 (stream 7, 100-900) at 10: an 800 µs window, all K1. Step 2 (1000-1050)
    holds aten::B 1005-1015 and nothing on the device: the capture stopped in it. Its own path (its host span, 50
    µs) is reported with it, but the rank's per-step length is step 1's, 0.8 ms, not (800 + 50) / 2; one step
    left out. The twin: step 2's aten::B launches K2 (stream 7, 1010-1030) at 1006: a whole step, its window
    [1010, 1030], both in the mean (0.41 ms)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 1050)
    b.cpu_op("aten::A", 0, 20)
    b.kernel("K1", 100, 800, stream=7, launch_at=10)
    b.cpu_op("aten::B", 1005, 10)
    if second_has_work:
        b.kernel("K2", 1010, 20, stream=7, launch_at=1006)
    m = _metrics(tmp_path, b)
    assert m.steps[0].critical_path.length_ms == pytest.approx(0.8)
    if second_has_work:
        assert m.critical_path.length_ms == pytest.approx(0.41)
        assert m.critical_path.steps_left_out == 0
    else:
        assert m.steps[1].critical_path.length_ms == pytest.approx(0.05)
        assert m.critical_path.length_ms == pytest.approx(0.8)
        assert m.critical_path.steps_left_out == 1


def _silent_op(free_at: int) -> TraceBuilder:
    """aten::A 0-20 launches an all-to-all X (stream 20, 30-3000) at 10; aten::cat 100-4000 records nothing until
    cudaFree `free_at`-(+50) inside it; aten::B 4010-4030 launches K (stream 7, 4040-4200) at 4020."""
    b = TraceBuilder()
    b.step(1, 0, 5000)
    b.cpu_op("aten::A", 0, 20)
    b.nccl("alltoall", 30, 2970, stream=20, nelems=1 << 20, launch_at=10)
    b.cpu_op("aten::cat", 100, 3900)
    b.cpu_op("cudaFree", free_at, 50, cat="cuda_runtime")
    b.cpu_op("aten::B", 4010, 20)
    b.kernel("K", 4040, 160, stream=7, launch_at=4020)
    return b


def test_op_silent_until_a_collective_ends_waited_on_it(tmp_path):
    """aten::cat records nothing for 2.95 ms, then cudaFree 50 µs after the all-to-all ended: the op's time was a
    wait on it (a straggler's peer blocked in its allocator). Window [30, 4200] back from K's end: K 4040-4200
    (compute 160), launch 4020-4040 (20), aten::B 4010-4020 (host op 10), the gap 4000-4010 (10), aten::cat
    3100-4000 (900), cudaFree 3050-3100 (allocator 50), the wait 3000-3050 (synchronize 50), X 30-3000
    (communication 2970). 4170 µs: communication 2970, compute 160, launch 20, cpu 1020."""
    cp = _metrics(tmp_path, _silent_op(3050)).steps[0].critical_path
    assert cp.length_ms == pytest.approx(4.17)
    assert cp.gpu_communication_bound == pytest.approx(100 * 2970 / 4170, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 1020 / 4170, abs=0.05)


def test_op_silent_long_after_the_collective_is_its_own_work(tmp_path):
    """The twin: cudaFree at 3300, 300 µs after the all-to-all ended: beyond a synchronize's return, so aten::cat's
    silence is its own work. Window [30, 4200]: K 160, launch 20, aten::B 10, gap 10, aten::cat 3350-4000 (650),
    cudaFree 50, aten::cat 100-3300 (3200), the thread before it from the window's start 30-100 (host gap 70).
    4170 µs: cpu 3990, compute 160, launch 20, no communication."""
    cp = _metrics(tmp_path, _silent_op(3300)).steps[0].critical_path
    assert cp.length_ms == pytest.approx(4.17)
    assert cp.gpu_communication_bound == 0
    assert cp.cpu_bound == pytest.approx(100 * 3990 / 4170, abs=0.05)


def _woken_early(wake: int) -> TraceBuilder:
    """aten::A 50-80 launches K1 (stream 7, 100-2000) at 70; the thread records nothing until aten::B at `wake` (60
    µs), which launches K2 (stream 8) 10 µs in; K2 runs 140 µs from 15 µs after its launch. Kernels begin after
    their launches: no measurable clock lag."""
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.cpu_op("aten::A", 50, 30)
    b.kernel("K1", 100, 1900, stream=7, launch_at=70)
    b.cpu_op("aten::B", wake, 60)
    b.kernel("K2", wake + 25, 140, stream=8, launch_at=wake + 10)
    return b


def test_wake_up_a_few_us_before_the_end_it_waited_on_waited_on_it(tmp_path):
    """The thread wakes at 1995, 5 µs before K1's end by the timestamps (a device clock ahead of the host's: no
    launch shows it): within 10 µs, so it waited on K1. Window [100, 2160] back from K2's end: K2 2020-2160
    (compute 140), launch 2005-2020 (15), aten::B 1995-2005 (host op 10), K1 from 1995 back to 100 (compute
    1895). 2060 µs: compute 2035, launch 15, cpu 10."""
    cp = _metrics(tmp_path, _woken_early(1995)).steps[0].critical_path
    assert cp.length_ms == pytest.approx(2.06)
    assert cp.gpu_compute_bound == pytest.approx(100 * 2035 / 2060, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 10 / 2060, abs=0.05)


def test_wake_up_30us_before_a_kernels_end_is_the_hosts(tmp_path):
    """The twin: the thread wakes at 1970, 30 µs before K1 ends: it did not wait on K1. Window [100, 2135]: K2
    1995-2135 (140), launch 1980-1995 (15), aten::B 1970-1980 (10), the idle thread 100-1970 (host gap 1870).
    2035 µs: cpu 1880, compute 140, launch 15."""
    cp = _metrics(tmp_path, _woken_early(1970)).steps[0].critical_path
    assert cp.length_ms == pytest.approx(2.035)
    assert cp.cpu_bound == pytest.approx(100 * 1880 / 2035, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 140 / 2035, abs=0.05)
