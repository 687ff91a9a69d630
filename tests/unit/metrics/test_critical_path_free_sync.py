"""A device-synchronizing free (`cudaFree` / `hipFree`: every free with the caching allocator off) waits for
the device's queued work: the critical path runs through the device work it waited on, and only the free's
time after the device drained is the allocator's own (mi300_resnet18_no_caching_allocator: the judge read
~7 % of its iterations as kernels run while hipFree waited, where the path had booked all of it to the
allocator). Answers worked out by hand from the times placed (µs; launch calls last 1 µs)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder


def _metrics(tmp_path, k1_end: int):
    """aten::A 0-20 launches K1 (stream 7) at 10, K1 running 30-k1_end; hipFree 50-1300 (top level);
    aten::B 1300-1310 launches K2 at 1305, K2 1306-1406 (launched 1305-1306, begins at once)."""
    b = TraceBuilder()
    b.step(1, 0, 1500)
    b.cpu_op("aten::A", 0, 20)
    b.kernel("K1", 30, k1_end - 30, stream=7, launch_at=10)
    b.cpu_op("hipFree", 50, 1250, cat="cuda_runtime")
    b.cpu_op("aten::B", 1300, 10)
    b.kernel("K2", 1306, 100, stream=7, launch_at=1305)
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def test_free_waits_on_the_kernel_queued_before_it(tmp_path):
    """K1 30-1100 is still running when the free begins: the free returns at 1300, 200 µs after K1 ended.
    Window [30, 1406] back from K2's end: K2 1306-1406 (compute 100), its launch 1305-1306 and aten::B
    1300-1305 (host 6), the free's tail after K1's end 1100-1300 (allocator 200, its wait: it drained the
    device), K1 30-1100 (compute 1070). 1376 µs: compute 1170, allocator 200, the rest host (6)."""
    m = _metrics(tmp_path, 1100)
    cp = m.steps[0].critical_path
    assert cp.length_ms == pytest.approx(1.376)
    causes = m.critical_path.causes
    assert causes["compute"] == pytest.approx(100 * 1170 / 1376, abs=0.05)
    assert causes["allocator"] == pytest.approx(100 * 200 / 1376, abs=0.05)
    assert causes["synchronize"] == 0  # a free's wait is named the allocator's, not a synchronize


def test_free_on_an_idle_device_is_all_the_allocators(tmp_path):
    """The twin: K1 30-40 ended before the free began, so it waited on nothing: the free 50-1300 is the
    allocator's whole. Window [30, 1406] (from the first device op): K2 100, launch + aten::B 6, the free 1250,
    the thread's gap 30-50 (20). 1376 µs: allocator 1250, compute 100, host gap 20."""
    m = _metrics(tmp_path, 40)
    assert m.steps[0].critical_path.length_ms == pytest.approx(1.376)
    causes = m.critical_path.causes
    assert causes["allocator"] == pytest.approx(100 * 1250 / 1376, abs=0.05)
    assert causes["compute"] == pytest.approx(100 * 100 / 1376, abs=0.05)
    assert causes["host_gap"] == pytest.approx(100 * 20 / 1376, abs=0.05)
