"""The host's waits for its device (hints.host_wait_ms, metrics/rank/host_wait.py) count a `cudaMemcpyAsync` that
held the host behind queued kernels (issue #34: resnet50_num_workers_4's pageable image copy, the host held
8.7-10.1 ms per step, 5.2-6.7 ms of it while the step's queued kernels ran, read as 0.07 ms of waits).

Generated steps of 10 ms (answers by construction): the host launches 4 fp32 GEMMs of 2,000 us at 0, 10, 20, 30 us
(they run back to back from 50 us), then calls `cudaMemcpyAsync` at 100 us for a pageable copy that starts when
the queue drains (8,050 us) and lasts 300 us; the call returns at 8,360 (10 us after the copy's end; a real
pageable call may return a little before its recorded end, resnet50's 58 us, which counts the same). The host
waited for queued kernels from 100 to 8,050 us with the device busy throughout: 7.95 ms per step, plus a 0.2-ms
`cudaStreamSynchronize` at 9,000 us (a 10-us kernel at 9,500 us ends the device's step): 8.15 ms. Twins: the same copy from pinned memory with `non_blocking=True`
(its call returns at 112 us, before its copy begins: 0.2 ms, the sync only), and a pageable copy with nothing
queued (the kernels launched after it: the call holds the host 300 us of copy and staging but waits for no
kernel: 0.2 ms)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.host_wait import held_copy_wait_ns, host_wait_ms
from llmdiag.diagnose.metrics.rank.steps import windows
from tests.gen.builder import TraceBuilder

STEP = 10_000


def _copy(b: TraceBuilder, call_at: int, call_dur: int, copy_at: int, name: str) -> None:
    b.kernel(name, copy_at, 300, cat="gpu_memcpy", launch=False)
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": b.pid, "tid": 1,
           "ts": b._abs(call_at), "dur": call_dur, "args": {"correlation": b._corr, "External id": b._ext}})


def _trace(path, kind: str) -> str:
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        first = t + 400 if kind == "nothing_queued" else t + 50
        for k in range(4):
            b.kernel("volta_sgemm_128x64_tn", first + 2000 * k, 2000, launch_at=t + 10 * k + (390 if first > t + 50 else 0))
        if kind == "held":
            _copy(b, t + 100, 8260, t + 8050, "Memcpy HtoD (Pageable -> Device)")
        elif kind == "pinned":
            _copy(b, t + 100, 12, t + 8050, "Memcpy HtoD (Pinned -> Device)")
        else:  # the copy first, the device idle: the host stages it, no kernel is waited for
            _copy(b, t + 20, 370, t + 80, "Memcpy HtoD (Pageable -> Device)")
        b.kernel("vectorized_elementwise_kernel", t + 9500, 10, launch_at=t + 9490)  # the device's step ends here
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid, "tid": 1,
               "ts": b._abs(t + 9000), "dur": 200, "args": {"correlation": 90_000 + n}})
    return b.write(path)


def _read(path):
    t = load_trace(str(path))
    classify(t)
    wins, _ = windows(t)
    return t, wins


@pytest.mark.parametrize("kind, want", [("held", 8.15), ("pinned", 0.2), ("nothing_queued", 0.2)])
def test_host_wait_counts_a_held_copy_behind_queued_kernels(tmp_path, kind, want):
    t, wins = _read(_trace(tmp_path / f"{kind}.json", kind))
    assert len(wins) == 3
    assert host_wait_ms(t, wins) == pytest.approx(want, abs=1e-6)
    assert held_copy_wait_ns(t, wins) == pytest.approx((want - 0.2) * 1e6 * 3, abs=1)


def _free_trace(path, busy: bool) -> str:
    """Steps of 10 ms: 4 GEMMs of 2,000 us from 50 us (launched at 0-30 us); a `hipFree` called at 100 us that
    returns at 8,100 (the device busy until 8,050: it waited 7.95 ms for the queue, then 50 us of its own), or,
    on the idle twin, the kernels launched after the free (called at 20, 300 us long, the device idle throughout:
    it waits for nothing). Plus the 0.2-ms synchronize at 9,000 us of each step."""
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        first = t + 50 if busy else t + 400
        for k in range(4):
            b.kernel("Cijk_Ailk_Bljk_SB_MT128x128x16", first + 2000 * k, 2000, launch_at=t + 10 * k + (0 if busy else 390))
        at, dur = (t + 100, 8000) if busy else (t + 20, 300)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "hipFree", "pid": b.pid, "tid": 1, "ts": b._abs(at),
               "dur": dur, "args": {"correlation": 80_000 + n}})
        b.kernel("vectorized_elementwise_kernel", t + 9500, 10, launch_at=t + 9490)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "hipDeviceSynchronize", "pid": b.pid, "tid": 1,
               "ts": b._abs(t + 9000), "dur": 200, "args": {"correlation": 90_000 + n}})
    return b.write(path)


@pytest.mark.parametrize("busy, want", [(True, 7.95 + 0.2), (False, 0.2)])
def test_a_free_waits_for_the_device_while_it_runs(tmp_path, busy, want):
    """A free synchronizes the device: its length while the device ran is the host waiting for it (the
    no-caching-allocator MI300 trace: every hipFree ends after the device's queue drains)."""
    t, wins = _read(_free_trace(tmp_path / "r0.json", busy))
    assert host_wait_ms(t, wins) == pytest.approx(want, abs=1e-6)
