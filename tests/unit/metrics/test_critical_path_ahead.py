"""A host running ahead of its device is not what bounds the step where it lets the queue drain for a moment: the
path is the device's work plus the short waits on late launches, not the host's ops back to its last synchronize
(critical_path/ahead.py; hta/trace_diff control.json read 61 % cpu_bound on a device ~84 % busy). The twin: a host
behind its device (every op launched after the previous one ended) stays host-bound. Answers worked out by hand in
each docstring from the times placed (µs; launch calls last 1 µs).
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder


def _metrics(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _ahead() -> TraceBuilder:
    """aten::fwd 0-1000 launches K1 at 10, K2 at 20, K3 at 30 (stream 7: 100-400, 400-700, 700-1000: K2 and K3
    queue behind the one before); aten::bwd 1030-1100 launches K4 at 1040 (1050-1350: it waited on its launch,
    50 µs after K3 ended) and K5 at 1060 (1350-1650, queued); aten::opt 1700-1760 launches K6 at 1710 (1720-1800:
    70 µs after K5 ended)."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.cpu_op("aten::fwd", 0, 1000)
    b.kernel("K1", 100, 300, stream=7, launch_at=10)
    b.kernel("K2", 400, 300, stream=7, launch_at=20)
    b.kernel("K3", 700, 300, stream=7, launch_at=30)
    b.cpu_op("aten::bwd", 1030, 70)
    b.kernel("K4", 1050, 300, stream=7, launch_at=1040)
    b.kernel("K5", 1350, 300, stream=7, launch_at=1060)
    b.cpu_op("aten::opt", 1700, 60)
    b.kernel("K6", 1720, 80, stream=7, launch_at=1710)
    return b


def test_host_ahead_but_for_short_launch_waits_is_the_devices(tmp_path):
    """Window [100, 1800] back from K6's end: K6 1720-1800 (compute 80), its launch 1710-1720 (10), aten::opt
    1700-1710 (host op 10), the thread's gap from K5's end 1650-1700 (host gap 50: K6 could have begun at 1650 but
    for its launch, and K5 had queued, so the host was ahead until then), K5 and K4 1050-1650 (600), K4's launch
    1040-1050 (10), aten::bwd 1030-1040 (host op 10), the gap from K3's end 1000-1030 (host gap 30), K3, K2, K1
    100-1000 (900). 1700 µs: compute 1580, launch 20, cpu 100 (the two waits, 1000-1050 and 1650-1720, are the
    120 µs off the device). Before, the walk stayed on the thread from K6's launch back through aten::bwd and
    aten::fwd to the window's start: cpu 1610 of 1700 (94.7 %) while the device computed 1500 of it."""
    m = _metrics(tmp_path, _ahead())
    cp, causes = m.steps[0].critical_path, m.critical_path.causes
    assert cp.length_ms == pytest.approx(1.7)
    assert cp.gpu_compute_bound == pytest.approx(100 * 1580 / 1700, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 20 / 1700, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * 100 / 1700, abs=0.05)
    assert causes["host_gap"] == pytest.approx(100 * 80 / 1700, abs=0.05)
    assert causes["host_op"] == pytest.approx(100 * 20 / 1700, abs=0.05)


def _behind() -> TraceBuilder:
    """aten::a 0-300 launches K1 at 290 (stream 7, 300-400); aten::b 400-700 launches K2 at 690 (700-800): each
    kernel launched after the one before had ended, none queued."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.cpu_op("aten::a", 0, 300)
    b.kernel("K1", 300, 100, stream=7, launch_at=290)
    b.cpu_op("aten::b", 400, 300)
    b.kernel("K2", 700, 100, stream=7, launch_at=690)
    return b


def test_host_behind_its_device_stays_host_bound(tmp_path):
    """The twin: K1 ran as soon as it was launched (the host was never ahead), so K2's wait on its launch goes
    back along the host. Window [300, 800] back from K2's end: K2 700-800 (compute 100), its launch 690-700 (10),
    aten::b 400-690 (host op 290), the gap 300-400 (host gap 100: the walk does not return to K1, which had not
    queued). 500 µs: compute 100, launch 10, cpu 390."""
    m = _metrics(tmp_path, _behind())
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(0.5)
    assert cp.cpu_bound == pytest.approx(100 * 390 / 500, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 100 / 500, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 500, abs=0.05)
