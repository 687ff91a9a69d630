"""What-if gains simulated on a rank's dependency graph (critical_path/simulate.py), on small generated traces whose
answers are worked out by hand in each docstring from the times the test places (µs), never from llmdiag's code.

The key properties: a faster kernel gains only where the step waited on it (not when the host's own work
overlapped it), time covered by two overlapping kernels or by two causes is taken off once, and a step's gain is
its period's (a device that finishes earlier gains nothing while its host sets the next step's start).
"""

from __future__ import annotations

import numpy as np
import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.critical_path.graph import SYNC_EDGE, THREAD, build
from llmdiag.diagnose.metrics.rank.critical_path.simulate import NEG, Simulator, simulated_gains
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.metrics.rank.precision import fp32_gemm_kernels
from llmdiag.diagnose.metrics.rank.steps import windows
from tests.gen.builder import TraceBuilder

SGEMM = "volta_sgemm_128x64_nn"  # fp32 by its name
FP32 = "fp32_gemm/4"  # the default device's assumed speed-up (model/gemm_speedup.py): 4×


def _rank(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _sync(b: TraceBuilder, start, dur, name="cudaDeviceSynchronize") -> None:
    b.cpu_op(name, start, dur, cat="cuda_runtime")


def _sync_then_cpu() -> TraceBuilder:
    """aten::mm launches K1 (fp32, 10 ms) at 50; K1 runs 100-10100; the host synchronizes 200-10110 (returns
    10 µs after K1), runs aten::relu 10110-15110 (5 ms of CPU) and launches K2 at 15100; K2 runs 15110-16110."""
    b = TraceBuilder()
    b.step(1, 0, 20000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 10000, launch_at=50)
    _sync(b, 200, 9910)
    b.cpu_op("aten::relu", 10110, 5000)
    b.kernel("K2", 15110, 1000, launch_at=15100)
    return b


def test_faster_kernel_the_host_waits_for(tmp_path):
    """Window [100, 16110]. K1 4× faster runs 100-2600; the sync returns 10 µs later (2610), relu runs 5 ms
    (to 7610), K2 is launched 4990 µs into it (7600) and begins 10 µs later (7610), ends 8610: the step is
    7500 µs shorter, K1's 10 ms × (1 − 1/4). The host-sync what-if: the host no longer waits, so the sync returns
    at its begin (200), relu runs 200-5200, K2 is launched at 5190 but its stream is busy until K1 ends (10100):
    it runs 10100-11100, 5010 µs earlier."""
    m = _rank(tmp_path, _sync_then_cpu())
    assert m.simulated_gain_ms[FP32] == pytest.approx(7.5)
    assert m.simulated_gain_ms["host_sync"] == pytest.approx(5.01)
    assert "comm" not in m.simulated_gain_ms  # no collective in the trace: nothing simulated for it


def test_kernel_off_the_path_gains_nothing(tmp_path):
    """aten::mm launches K1 (fp32, 10 ms, 100-10100) at 50; the host then runs aten::relu for 20 ms (100-20100)
    and launches K2 at 20090 (runs 20100-21100). K1 ends long before K2 is launched: the step waits on the host,
    so K1 at any speed leaves it 21 ms: gain 0, although K1 is half the step's device time."""
    b = TraceBuilder()
    b.step(1, 0, 22000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 10000, launch_at=50)
    b.cpu_op("aten::relu", 100, 20000)
    b.kernel("K2", 20100, 1000, launch_at=20090)
    m = _rank(tmp_path, b)
    assert m.simulated_gain_ms[FP32] == 0.0


def test_overlapping_kernels_taken_off_once(tmp_path):
    """Two fp32 GEMMs of 10 ms on two streams, both 100-10100 (launched at 50 and 60), then the host synchronizes
    (200-10110) and launches K3 at 10120 (runs 10130-11130). 4× faster both run 100-2600: the sync returns at 2610
    and K3 runs 2630-3630, 7500 µs earlier: 10 ms of time covered by both is taken off once, not twice (15 ms)."""
    b = TraceBuilder()
    b.step(1, 0, 12000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 10000, stream=7, launch_at=50)
    b.kernel(SGEMM, 100, 10000, stream=8, launch_at=60)
    _sync(b, 200, 9910)
    b.kernel("K3", 10130, 1000, launch_at=10120)
    m = _rank(tmp_path, b)
    assert m.simulated_gain_ms[FP32] == pytest.approx(7.5)


def _sim(tmp_path, b: TraceBuilder):
    t = load_trace(b.write(str(tmp_path / "r0.json")))
    classify(t, None)
    wins, _ = windows(t, False)
    return t, wins, Simulator(t, build(t), wins)


def test_two_causes_together_count_their_shared_time_once(tmp_path):
    """The trace of test_faster_kernel_the_host_waits_for with both edits at once: K1 runs 100-2600, the host does
    not wait (relu 200-5200), K2 is launched at 5190 and begins 10 µs later (5200; its stream is free since
    2600), ends 6200: 9910 µs off the step. Apart the two gain 7500 and 5010, 12510: their sum would count the
    2600 µs both take off twice."""
    t, wins, s = _sim(tmp_path, _sync_then_cpu())
    pos = np.full(len(t), -1)
    pos[s.g.ev] = np.arange(len(s.g.ev))
    fast = s.scaled(pos[fp32_gemm_kernels(t)], 0.25)
    nosync = s.without_syncs()
    both = np.where(nosync == NEG, NEG, fast)
    g_fast, g_sync, g_both = s.gain(fast), s.gain(nosync), s.gain(both)
    assert g_fast is not None and g_sync is not None and g_both is not None
    assert (g_fast[0], g_sync[0], g_both[0]) == pytest.approx((7.5, 5.01, 9.91))
    assert g_both[1] == pytest.approx([6.2 - 0.1])  # the step's new length, ms: 100-6200


def test_gain_is_the_period_not_the_device_window(tmp_path):
    """Two steps 30 ms apart, each: aten::mm launches an fp32 GEMM (10 ms, k0+100..k0+10100) at k0+50 while the
    host runs 29.8 ms of CPU (k0+100..k0+29900) without waiting for it. The device window (its first to last op) would
    shrink by 7.5 ms with a 4× GEMM, but the host starts step 2's work at 30000 whatever the device does: the
    period, from step 1's start to step 2's, stays 30 ms. Gain 0 (the last step, with no next start, is left out of
    the mean)."""
    b = TraceBuilder()
    for k in range(2):
        k0 = 30000 * k
        b.step(k + 1, k0, k0 + 30000)
        b.cpu_op("aten::mm", k0, 100)
        b.kernel(SGEMM, k0 + 100, 10000, launch_at=k0 + 50)
        b.cpu_op("aten::relu", k0 + 100, 29800)
    m = _rank(tmp_path, b)
    assert m.simulated_gain_ms[FP32] == 0.0


def test_device_bound_period_shrinks(tmp_path):
    """The host launches all work up front (at 10..40), so the device runs back to back: step 1's GEMM 100-10100,
    its K 10100-11100; step 2's GEMM 11100-21100, K 21100-22100 (each queued behind the one before). Steps begin
    at 100 and 11100. 4× faster GEMMs: step 2 begins at 100 + 2500 + 1000 = 3600: the period shrinks 7500 µs."""
    b = TraceBuilder()
    b.step(1, 0, 50)
    b.step(2, 50, 23000)
    b.cpu_op("aten::mm", 0, 50)
    b.kernel(SGEMM, 100, 10000, launch_at=10)
    b.kernel("K", 10100, 1000, launch_at=20)
    b.cpu_op("aten::mm", 50, 100)
    b.kernel(SGEMM, 11100, 10000, launch_at=60)
    b.kernel("K", 21100, 1000, launch_at=70)
    m = _rank(tmp_path, b)
    assert [s.step for s in m.steps] == [1, 2]
    assert m.simulated_gain_ms[FP32] == pytest.approx(7.5)


def test_hidden_collective(tmp_path):
    """The host launches an all-reduce (10 ms, 100-10100, comm stream) at 50, synchronizes 200-10110 and launches
    K2 at 10120 (10130-11130). With the collective at zero time it ends at 100; the sync, begun at 200, returns at
    once (its 10 µs return after the all-reduce ended, 110, is already past), the host launches K2 10 µs later (210,
    the gap kept) and K2 begins 10 µs after that: 220-1220, 9910 µs earlier."""
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 12000)
    b.cpu_op("c10d::allreduce_", 0, 100)
    b.nccl("allreduce", 100, 10000, launch_at=50, nelems=1 << 20, group_size=2, pg_ranks=[0, 1])
    _sync(b, 200, 9910)
    b.kernel("K2", 10130, 1000, launch_at=10120)
    m = _rank(tmp_path, b)
    assert m.simulated_gain_ms["comm"] == pytest.approx(9.91)


def test_unprofiled_host_gaps_simulate_nothing(tmp_path):
    """The trace of test_gain_is_the_period_not_the_device_window with the host in no op for 5 ms of each 30 ms
    step (aten::relu ends at k0+25000): 5 of the 30 ms of step 1's period, 17 % ≥ 10 %, are host time the trace
    does not explain (work outside the profiled ops, or a wait on something): no what-if is simulated."""
    b = TraceBuilder()
    for k in range(2):
        k0 = 30000 * k
        b.step(k + 1, k0, k0 + 30000)
        b.cpu_op("aten::mm", k0, 100)
        b.kernel(SGEMM, k0 + 100, 10000, launch_at=k0 + 50)
        b.cpu_op("aten::relu", k0 + 100, 24900)
    m = _rank(tmp_path, b)
    assert m.simulated_gain_ms == {}


def test_unexplained_waits_simulate_nothing(tmp_path):
    """K2 is launched at 60, its stream is free after K1 (100-1100), yet it begins at 6100: 5 ms waiting on
    something the trace does not show, the whole step's path but K1 and K2. The graph cannot say what K2 waited
    on, so no what-if is simulated (the rules keep their bounds)."""
    b = TraceBuilder()
    b.step(1, 0, 8000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 1000, launch_at=50)
    b.kernel("K2", 6100, 1000, launch_at=60)
    _sync(b, 200, 6910)
    m = _rank(tmp_path, b)
    assert m.simulated_gain_ms == {}


def test_blocked_launch_waits_for_its_queue(tmp_path):
    """70 kernels of 1 ms each queued on stream 7 (launched at 0, 10, ..., 690; running 1000·i+100 onwards); the
    71st launch call blocks 800-5105, returning 5 µs after the op begun at 5100 (op 5) freed a slot. The graph gets
    one queue edge into that call's end, from op 5's begin; a short launch call gets none."""
    b = TraceBuilder()
    b.step(1, 0, 80000)
    for i in range(70):
        b.kernel(f"K{i}", 100 + 1000 * i, 1000, launch_at=10 * i)
    b.kernel("K70", 70100, 1000, launch_at=800)
    blocked = [e for e in b.events if e.get("name") == "cudaLaunchKernel" and e["ts"] == b._abs(800)]
    blocked[0]["dur"] = 4305  # the call lasts 800-5105
    t, wins, s = _sim(tmp_path, b)
    q = np.flatnonzero(s.queue)
    assert len(q) == 1
    g = s.g
    k_src, k_dst = g.ev[g.src[q[0]] // 2], g.ev[g.dst[q[0]] // 2]
    assert t.names[t.name[k_src]] == "K5" and g.src[q[0]] % 2 == 0
    assert t.names[t.name[k_dst]] == "cudaLaunchKernel" and g.dst[q[0]] % 2 == 1
    assert t.dur[k_dst] == 4305 * 1000  # that call, in ns


def test_hostile_times_stay_bounded(tmp_path):
    """Times that close a loop the skew rule does not open: thread 1's sync [300, 400] returns 20 µs after K2
    (stream 8, launched by thread 2 at 200) ends at 380; K2 began 5 µs after K1 (stream 7) ended at 355, ready
    since its launch (a stream-event wait); K1 is launched by thread 1 at 450, after the sync, yet the device clock
    puts it at 300-355. Sync end -> launch (thread order) -> K1 -> K2 -> sync end: a loop of weight 0 in the trace.
    The pass cuts it (at its earliest anchor, which reads the rest at trace times): one pass, the unedited graph
    re-timed to the trace, every gain a finite ms figure ≥ 0."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 0, 100, tid=2)
    b.kernel("K2", 360, 20, stream=8, launch_at=200, tid=2)
    _sync(b, 300, 100, "cudaStreamSynchronize")
    b.cpu_op("aten::mm", 440, 100)
    b.kernel(SGEMM, 300, 55, stream=7, launch_at=450)
    t, wins, s = _sim(tmp_path, b)
    assert s.cuts >= 1
    assert np.array_equal(s.retime(s.w), s.t0)
    out = simulated_gains(t, wins, 4.0)
    assert all(np.isfinite(v) and v >= 0 for v in out.values())
    pos = np.full(len(t), -1)
    pos[s.g.ev] = np.arange(len(s.g.ev))
    r = s.gain(s.scaled(pos[fp32_gemm_kernels(t)], 0.25))
    assert r is not None and np.isfinite(r[0]) and r[0] >= 0


@pytest.mark.parametrize("make", [_sync_then_cpu, lambda: _queued_steps()])
def test_unedited_weights_retime_to_the_trace(tmp_path, make):
    """With no edit every point keeps its time (gain() relies on it and skips that pass)."""
    _, _, s = _sim(tmp_path, make())
    assert np.array_equal(s.retime(s.w), s.t0)


def _queued_steps() -> TraceBuilder:
    """Two streams, launches queued ahead, a stream-event-like hand-over and a sync: every edge type."""
    b = TraceBuilder()
    b.step(1, 0, 5000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 1000, stream=7, launch_at=10)
    b.kernel("K2", 1100, 500, stream=7, launch_at=20)
    b.kernel("K3", 1610, 300, stream=8, launch_at=30)  # began 10 µs after K2 ended, ready before: a wait edge
    _sync(b, 200, 1720)
    b.cpu_op("aten::relu", 1930, 100)
    b.kernel("K4", 2040, 100, stream=7, launch_at=1940)
    return b


def _handoff() -> TraceBuilder:
    """Two host threads that launch work, one stream. Main: aten::mm 0-100 launches an fp32 GEMM K1 at 50 (runs
    100-10100); aten::ones_like 200-300, then nothing until aten::relu 11140-11240, which launches K3 at 11190
    (runs 11200-12200). Thread 2 (autograd), first seen 200 µs after main went quiet: MmBackward0 500-600 launches
    K2 at 550, queued behind K1 (runs 10100-11100). So the graph has both resume edges (resume.py): main's
    ones_like end -> MmBackward0's begin (a hand-over, typed THREAD across two threads), and K2's end -> relu's
    begin (main woke 40 µs after K2 ended: an unrecorded synchronize, typed SYNC)."""
    b = TraceBuilder()
    b.step(1, 0, 20000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 10000, launch_at=50)
    b.cpu_op("aten::ones_like", 200, 100)
    b.cpu_op("MmBackward0", 500, 100, tid=2)
    b.kernel("K2", 10100, 1000, launch_at=550, tid=2)
    b.cpu_op("aten::relu", 11140, 100)
    b.kernel("K3", 11200, 1000, launch_at=11190)
    return b


def test_handoff_across_threads_retimes_in_one_pass(tmp_path):
    """The hand-over edge once entered the thread chains as a chain of its own: its two points were re-timed twice
    and the rounds never settled, even with no edit (no gain at all). Worked by hand, window [100, 12200]
    (K1's begin to K3's end):
    - K1 4× faster runs 100-2600; K2 (stream edge, weight 0) 2600-3600; main wakes 40 µs later (the resume edge's
      weight) at 3640, relu 3640-3740, launches K3 at 3690, K3 begins 10 µs later: 3700-4700. Step 12.1 -> 4.6 ms:
      7.5 ms, K1's 10 ms × (1 − 1/4).
    - The host-sync what-if removes recorded synchronizing calls' edges only: the resume edge is an unrecorded
      wait (no call to remove), so nothing moves: gain 0, the step 12.1 ms."""
    t, wins, s = _sim(tmp_path, _handoff())
    g = s.g
    th = t.thread[g.ev[g.src // 2]] != t.thread[g.ev[g.dst // 2]]
    # the hand-over, and MmBackward0's end -> relu (main blocked in backward: resume.backward_handoff; K2's binds)
    assert ((g.etype == THREAD) & th).sum() == 2
    assert len(np.unique(s.order)) == len(s.order) == g.nodes
    assert np.array_equal(s.retime(s.w), s.t0)
    pos = np.full(len(t), -1)
    pos[g.ev] = np.arange(len(g.ev))
    fast, nosync = s.gain(s.scaled(pos[fp32_gemm_kernels(t)], 0.25)), s.gain(s.without_syncs())
    assert fast is not None and nosync is not None
    assert fast[0] == pytest.approx(7.5) and fast[1] == pytest.approx([4.6])
    assert nosync[0] == 0.0 and nosync[1] == pytest.approx([12.1])
    assert not (s.recorded_syncs() & (s.g.etype == SYNC_EDGE)).any() and (s.g.etype == SYNC_EDGE).sum() == 1


def test_sync_on_an_op_launched_after_it_is_not_a_dependency(tmp_path):
    """A device clock 60 µs ahead of the host's: main's cudaStreamSynchronize 200-300 returns, then aten::add_
    310-330 launches K2 at 320, which the device clock puts at 260-280, inside the sync. graph.py reads the sync as
    waiting on K2 (the op that ended last inside it), which closes a loop: sync end -> add_ -> launch -> K2 -> sync
    end. Neither graph.py (blocking.py: a sync waits only on ops launched before it) nor the simulation's graph
    keeps that edge, so no loop is left and the unedited graph re-times to the trace. The sync waits on K1 (fp32,
    100-250, launched at 50), the op launched before it. Window [100, 280] (K1's begin to K2's end). K1 4× faster
    ends at 138 (150 × 1/4 rounded: 38 µs); the sync cannot return before its own begin, 200 (its 100 µs were
    read from its thread): it ends at 200, add_ runs 210-230 and launches K2 at 220, which begins at 160 (weight
    −60) and ends at 180: the window is 80 µs, 100 µs shorter: gain 0.1 ms."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 0, 100)
    b.kernel(SGEMM, 100, 150, launch_at=50)
    _sync(b, 200, 100, "cudaStreamSynchronize")
    b.cpu_op("aten::add_", 310, 20)
    b.kernel("K2", 260, 20, launch_at=320)
    t, wins, s = _sim(tmp_path, b)
    g0 = build(t)

    def syncs_from_k2(g):
        e = g.etype == SYNC_EDGE
        return int((e & (t.name[g.ev[g.src // 2]] == t.names.index("K2"))).sum())

    # graph.py no longer makes that edge either (blocking.py: a sync waits only on ops launched before it); the
    # simulation's own guard stays for graphs that still do
    assert syncs_from_k2(g0) == 0 and syncs_from_k2(s.g) == 0
    assert np.array_equal(s.retime(s.w), s.t0)
    pos = np.full(len(t), -1)
    pos[s.g.ev] = np.arange(len(s.g.ev))
    r = s.gain(s.scaled(pos[fp32_gemm_kernels(t)], 0.25))
    assert r is not None and r[0] == pytest.approx(0.1) and r[1] == pytest.approx([0.08])
