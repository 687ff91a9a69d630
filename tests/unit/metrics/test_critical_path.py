"""The critical path of small generated traces, against paths worked out by hand from the events' times.

Each trace's answer is derived in the test's docstring from the times the test places, not from llmdiag's code:
the path walks back from the step's last device op along the dependency that arrived last.
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder


def _rank(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _runtime(b: TraceBuilder, name: str, start, dur) -> None:
    b.cpu_op(name, start, dur, cat="cuda_runtime")


def _launch_sync_gap() -> TraceBuilder:
    """One step: K1 and K2 back to back on a stream, a synchronize, an unprofiled gap, relu launching K3 (the
    answers are worked out in test_launch_stream_sync_and_gap)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 10, 100)
    b.kernel("K1", 60, 400, launch_at=50)
    b.cpu_op("aten::add", 120, 20)
    b.kernel("K2", 460, 100, launch_at=130)
    _runtime(b, "cudaStreamSynchronize", 150, 420)
    b.cpu_op("aten::relu", 600, 100)
    b.kernel("K3", 660, 40, launch_at=650)
    return b


def test_launch_stream_sync_and_gap(tmp_path):
    """Device window [60, 700] µs. Back from K3's end (700): K3 runs 660-700 (compute 40); it was launched at
    650 after K2 ended at 560, so its launch binds: launch delay 650-660 (10); the launch sits 50 µs into
    aten::relu, begun at 600 (host op 50); before relu the thread was in no op since the stream synchronize
    returned at 570 (unprofiled gap 30); the synchronize returned 10 µs after K2 ended (synchronize 10); K2 ran
    460-560 (compute 100), behind K1 on its stream (K1 ended at 460, K2 was launched at 130: no gap); K1 ran
    60-460 (compute 400), and the window begins at 60. 640 µs: compute 540, cpu 90, launch 10."""
    b = _launch_sync_gap()
    m = _rank(tmp_path, b)
    cp = m.steps[0].critical_path
    assert cp is not None
    assert cp.length_ms == pytest.approx(0.640)
    assert cp.gpu_compute_bound == pytest.approx(100 * 540 / 640, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 90 / 640, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 640, abs=0.05)
    assert cp.gpu_kernel_kernel_overhead == 0 and cp.gpu_communication_bound == 0
    causes = m.critical_path.causes
    assert causes["host_op"] == pytest.approx(100 * 50 / 640, abs=0.05)
    assert causes["host_gap"] == pytest.approx(100 * 30 / 640, abs=0.05)
    assert causes["synchronize"] == pytest.approx(100 * 10 / 640, abs=0.05)
    assert m.critical_path.length_ms == pytest.approx(0.640)


def test_timeline_track_is_the_path_in_time_order(tmp_path):
    """The same trace as above, its path as the timeline track (`analyze --timeline`): K1 and K2 back to back are
    one compute run 60-560, then the synchronize's return, the gap, relu, the launch delay and K3 (µs)."""
    b = _launch_sync_gap()
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json")), tracks=True))
    got = [(s // 1000, e // 1000, cause) for s, e, step, cause, _ in out.tracks.critical]
    assert got == [(60, 560, "compute"), (560, 570, "synchronize"), (570, 600, "host_gap"), (600, 650, "host_op"),
                   (650, 660, "launch_delay"), (660, 700, "compute")]


def test_event_wait_across_streams(tmp_path):
    """KA (stream 7) runs 100-500, KB (stream 20) was launched at 20 on an empty stream but began only at 505,
    5 µs after KA ended: it waited on KA (a stream-event wait). Window [100, 600]: KB 505-600 (compute 95),
    the wait 500-505 (event wait, kernel-kernel overhead 5), KA 100-500 (compute 400). Read as a launch
    delay instead, the 485 µs between KB's launch and its start would be launch overhead."""
    b = TraceBuilder()
    b.step(1, 0, 700)
    b.cpu_op("aten::op", 0, 30)
    b.kernel("KA", 100, 400, stream=7, launch_at=10)
    b.kernel("KB", 505, 95, stream=20, launch_at=20)
    cp = _rank(tmp_path, b).steps[0].critical_path
    assert cp.length_ms == pytest.approx(0.5)
    assert cp.gpu_compute_bound == pytest.approx(99.0)
    assert cp.gpu_kernel_kernel_overhead == pytest.approx(1.0)
    assert cp.gpu_kernel_launch_overhead == 0


def test_communication_kernel_is_its_own_category(tmp_path):
    """An all-reduce (NCCL kernel) 100-300 behind a compute kernel 20-100 on the same stream, launched at 10 and
    15: window [20, 300], communication 200, compute 80."""
    b = TraceBuilder()
    b.step(1, 0, 400)
    b.cpu_op("aten::op", 0, 30)
    b.kernel("K", 20, 80, stream=7, launch_at=10)
    b.nccl("allreduce", 100, 200, stream=7, nelems=1024, launch_at=15)
    cp = _rank(tmp_path, b).steps[0].critical_path
    assert cp.gpu_communication_bound == pytest.approx(100 * 200 / 280, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 80 / 280, abs=0.05)


def test_cpu_trace_has_none(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.cpu_op("aten::mm", 10, 50)
    m = _rank(tmp_path, b)
    assert m.critical_path is None and m.steps[0].critical_path is None


def test_hta_compat_graph(tmp_path):
    """HTA's graph on the host step [0, 1000]: op A 10-110 launches K1 at 50 (K1 runs 60-460 on an empty stream);
    op B 200-250; cudaStreamSynchronize 300-500 waits on stream 7 (its Stream Sync marker). HTA weighs the gaps
    between top-level ops and the inside of the synchronize zero, so the longest path is A's begin -> the launch
    (cpu 40) -> K1's begin (launch 10) -> K1's end (compute 400) -> the synchronize's end (0): 450 µs over 5
    nodes, against 150 along the host thread alone. Our own path tiles the step's device window 60-500 (the Stream
    Sync marker ends it): the synchronize's return after K1's end 460-500 (synchronize 40), K1 (compute 400)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::A", 10, 100)
    b.kernel("K1", 60, 400, launch_at=50)
    b.cpu_op("aten::B", 200, 50)
    b.cpu_op("cudaStreamSynchronize", 300, 200, cat="cuda_runtime", args={"correlation": 77})
    b.raw({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": b.base_us + 495,
           "dur": 5, "args": {"stream": 7, "correlation": 77, "device": 0}})
    path = b.write(str(tmp_path / "r0.json"))
    cp = run_job(RankJob(path, hta_compat=True)).metrics.steps[0].critical_path
    assert cp.length_ms == pytest.approx(0.450)
    assert cp.cpu_bound == pytest.approx(100 * 40 / 450, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 450, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 400 / 450, abs=0.05)
    ours = run_job(RankJob(path)).metrics.steps[0].critical_path
    assert ours.length_ms == pytest.approx(0.440)
    assert ours.gpu_compute_bound == pytest.approx(100 * 400 / 440, abs=0.05)
    assert ours.cpu_bound == pytest.approx(100 * 40 / 440, abs=0.05)


def test_a_loop_of_dependencies_in_hostile_times_ends(tmp_path):
    """A kernel that ran (20-40) before its own launch (60), which the thread made after a synchronize (10-50) that
    waited for that kernel: each point's last-arriving dependency leads around the loop K end -> K begin -> launch
    -> synchronize end -> K end. The walk stops instead of circling, and the step's time still adds up."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.kernel("K0", 0, 5, launch_at=0)
    _runtime(b, "cudaStreamSynchronize", 10, 40)
    b.kernel("K", 20, 20, launch_at=60)
    m = _rank(tmp_path, b)
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(m.steps[0].time_ms)
    assert cp.cpu_bound + cp.gpu_compute_bound + cp.gpu_kernel_launch_overhead == pytest.approx(100, abs=0.2)
