"""A main thread blocked in loss.backward() waits on the autograd thread's last point of that backward, however long
it then takes to resume (resume.backward_handoff): the evidence is the autograd engine's own ops on the other thread
while the main thread was silent, not a time tolerance. Twins: the same times with no backward op on the other
thread (only the 1 ms tolerance route, which this wake-up misses), and a main thread that does recorded host work of
its own after backward returns. Answers worked out by hand in each docstring from the times placed (µs).

A cudaLaunchKernel the builder writes lasts 1 µs; the window runs from the step's first device op's begin to its
last's end (K1 20 -> K3's end).
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder

AUTOGRAD = 200  # the autograd engine's device thread


def _metrics(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _backward(engine_ops: bool, main_work: int = 0) -> TraceBuilder:
    """Main thread: aten::ones_like 0-100 launches K1 (stream 7, 20-80) at 10, then records nothing (blocked in
    backward) until 3400; with `main_work`, aten::clip_grad_norm_ 3400-(3400 + main_work) launching nothing; then
    aten::_foreach_mul_ (100 µs) launching K3 10 µs in (stream 7, from 10 µs after the launch to the op's end).
    Thread 200: `autograd::engine::evaluate_function: MulBackward0` 300-1300 (or, without `engine_ops`, an
    aten::mul) launching K2 at 1200 (stream 7, 1210-1400), then torch.distributed.ddp.reducer::copy_bucket_to_grad
    1300-1900 (host work, nothing launched), then nothing: its last point is 1900, 1500 µs before the main thread's
    next, past HANDOFF_TOL_NS (1 ms)."""
    b = TraceBuilder()
    t3 = 3400 + main_work
    b.step(1, 0, t3 + 200)
    b.cpu_op("aten::ones_like", 0, 100)
    b.kernel("K1", 20, 60, stream=7, launch_at=10)
    b.cpu_op("autograd::engine::evaluate_function: MulBackward0" if engine_ops else "aten::mul", 300, 1000,
             tid=AUTOGRAD)
    b.kernel("K2", 1210, 190, stream=7, launch_at=1200, tid=AUTOGRAD)
    b.cpu_op("torch.distributed.ddp.reducer::copy_bucket_to_grad", 1300, 600, tid=AUTOGRAD)
    if main_work:
        b.cpu_op("aten::clip_grad_norm_", 3400, main_work)
    b.cpu_op("aten::_foreach_mul_", t3, 100)
    b.kernel("K3", t3 + 20, 80, stream=7, launch_at=t3 + 10)
    return b


def test_main_thread_blocked_in_backward_waits_on_the_autograd_threads_last_point(tmp_path):
    """The main thread, silent 100-3400 while thread 200 ran MulBackward0's engine op, was blocked in backward: it
    waited on thread 200's last point (1900), 1500 µs before it resumed. Window [20, 3500] back from K3's end: K3
    3420-3500 (compute 80), its launch 3410-3420 (launch delay 10), _foreach_mul_ 3400-3410 (host op 10), the
    hand-over 1900-3400 (host gap 1500: the main thread's own), copy_bucket_to_grad 1300-1900 (host op 600), the
    engine op after its launch 1201-1300 (host op 99), the launch 1200-1201 (runtime 1), the engine op 300-1200
    (host op 900), the main thread's hand-over to thread 200 100-300 (host gap 200: resumed within the tolerance),
    ones_like from the window's start 20 to 100 (host op 80; its launch at 10-11 is before the window). 3480 µs:
    host op 1689, runtime 1, host gap 1700, compute 80, launch 10. Read through the tolerance alone the host gap
    would be 100-3400, 3300 (the twin)."""
    m = _metrics(tmp_path, _backward(True))
    cp, causes = m.steps[0].critical_path, m.critical_path.causes
    assert cp.length_ms == pytest.approx(3.48)
    assert causes["host_gap"] == pytest.approx(100 * 1700 / 3480, abs=0.05)
    assert causes["host_op"] == pytest.approx(100 * 1689 / 3480, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 80 / 3480, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 3480, abs=0.05)


def test_without_backward_ops_the_tolerance_alone_decides(tmp_path):
    """The twin: thread 200 ran an aten::mul, no autograd engine op, so nothing says the main thread was blocked on
    it, and it resumed 1500 µs after thread 200's last point, past the tolerance: no hand-over. Window [20, 3500]:
    K3 (compute 80), launch 10, _foreach_mul_ 3400-3410 (host op 10), the main thread idle since ones_like ended,
    100-3400 (host gap 3300), ones_like 20-100 (host op 80). 3480 µs."""
    m = _metrics(tmp_path, _backward(False))
    cp, causes = m.steps[0].critical_path, m.critical_path.causes
    assert cp.length_ms == pytest.approx(3.48)
    assert causes["host_gap"] == pytest.approx(100 * 3300 / 3480, abs=0.05)
    assert causes["host_op"] == pytest.approx(100 * 90 / 3480, abs=0.05)


def test_main_threads_own_host_work_after_backward_stays_its_own(tmp_path):
    """The twin with host work: after backward returns the main thread runs aten::clip_grad_norm_ 3400-4400 (no
    launch) before _foreach_mul_ 4400-4500 (K3 4420-4500, launched at 4410). Window [20, 4500]: K3 (compute 80),
    launch 10, _foreach_mul_ 4400-4410 (host op 10), clip_grad_norm_ 3400-4400 (host op 1000: the main thread's
    work, on the path), then as in the planted case: hand-over 1900-3400 (host gap 1500), thread 200's 1300-1900
    (600), 1201-1300 (99), runtime 1, 300-1200 (900), hand-over 100-300 (200), ones_like 20-100 (80). 4480 µs:
    host op 2689, runtime 1, host gap 1700, compute 80, launch 10."""
    m = _metrics(tmp_path, _backward(True, main_work=1000))
    cp, causes = m.steps[0].critical_path, m.critical_path.causes
    assert cp.length_ms == pytest.approx(4.48)
    assert causes["host_op"] == pytest.approx(100 * 2689 / 4480, abs=0.05)
    assert causes["host_gap"] == pytest.approx(100 * 1700 / 4480, abs=0.05)
    assert cp.gpu_compute_bound == pytest.approx(100 * 80 / 4480, abs=0.05)
