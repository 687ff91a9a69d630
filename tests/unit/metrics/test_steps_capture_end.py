"""The last step's window at the capture's end: the device work that every step carries into the next step's
window, drained under the capture-end `cudaDeviceSynchronize`, is not the last step's time; its own kernels
running long are (docs/metrics.md "Analysis window").

Generated traces with hand-placed kernels, so every window is known here (see `layout`). The shape is the
real traces' (TorchRec DLRM, HTA's a100_16rank): each step's communication runs 0.6 ms into the next step's
window on a host period of 1 ms, so the device side of each step spans 1.6 ms while the steps follow each
other every 1 ms.
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import MAIN_TID, TraceBuilder

WORLD, STEPS, P = 2, 5, 1000  # ranks, steps, host period (µs)
CARRY = 600  # how far each step's all-reduce runs into the next step's window


def layout(rank: int, last_compute_us: int = 700, sync_in_step: bool = False) -> TraceBuilder:
    """Host step k spans [S, S + P] (S = (k-1)·P). Device: compute [S+100, S+100+700] on stream 7, all-reduce
    [S+700, S+P+700] on stream 20 (launched at S+10, S+20). So window k < 5 = [S+100, next start S+P+100]:
    1000 µs. Step 5 (S5 = 4000): its compute lasts `last_compute_us`, its all-reduce ends at S5+1700; the
    capture ends with a cudaDeviceSynchronize at S5+1001 (after ProfilerStep#5, as torch.profiler's stop
    does) held until the device drains, and one copy launched after the step (in no step) runs at the drain's
    end. With `sync_in_step` the host step 5 itself waits on that synchronize (a
    `torch.cuda.synchronize()` inside the step): its host span runs to the drain."""
    b = TraceBuilder(rank=rank, world_size=WORLD, base_us=1_698_958_767_000_000)
    group = dict(nelems=1 << 20, group_size=WORLD, pg_ranks=list(range(WORLD)))
    last = (STEPS - 1) * P
    drain = last + max(P + CARRY, 100 + last_compute_us)  # when the device runs out of step 5's work
    host_end = drain + 10 if sync_in_step else last + P
    for k in range(1, STEPS + 1):
        s = (k - 1) * P
        b.step(k, s, host_end if k == STEPS else s + P)
        b.kernel("void gemm_kernel<float>()", s + 100, last_compute_us if k == STEPS else 700, stream=7,
                 launch_at=s + 10)
        b.nccl("allreduce", s + 700, P, stream=20, launch_at=s + 20, **group)
    sync_at = last + P - 100 if sync_in_step else host_end + 1
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": b.pid, "tid": MAIN_TID,
           "ts": b._abs(sync_at), "dur": drain - sync_at, "args": {"correlation": 99_999}})
    b.memcpy(drain, 200, stream=7, launch_at=host_end + 5)  # launched after the last step: in no step
    return b


def analyse(tmp_path, **kw):
    d = tmp_path / "t"
    for r in range(WORLD):
        layout(r, **kw).write(d / f"rank{r}.json")
    return analyze_path(str(d), jobs=1)


def test_the_drained_carry_is_not_the_last_steps_time(tmp_path):
    """Every step takes the planted 1 ms; the last one's device work runs 0.7 ms past its host end (the carry
    every step has, plus its 0.1 ms start delay) and the capture-end sync waits for it. Before, the last
    window ran to the drain (1.6 ms, 1.6x the median) and step 5 was named an outlier."""
    a = analyse(tmp_path)
    assert [s.step for s in a.steps.steps] == list(range(1, STEPS + 1))
    assert [s.time_ms for s in a.steps.steps] == pytest.approx([P / 1e3] * STEPS)
    assert a.steps.median_ms == pytest.approx(P / 1e3) and a.steps.outliers == []
    assert not any(" took " in i.message for i in a.issues)
    (w,) = {i.message for i in a.issues if "the last step's device work" in i.message}
    assert f"ran {CARRY / 1e3:.2f} ms past" in w and "in no step" in w


def test_the_last_steps_own_kernel_running_long_is_flagged(tmp_path):
    """The twin: step 5's own GEMM runs 2.8 ms instead of 0.7. Its work ends at S5+2900 instead of S5+1700,
    1.2 ms later than the carry explains: its window is the 1 ms period plus that, 2.2 ms, an outlier."""
    a = analyse(tmp_path, last_compute_us=2800)
    end = 100 + 2800 - CARRY  # its own end (S5+2900) less the carry every earlier step had
    assert [s.time_ms for s in a.steps.steps] == pytest.approx([P / 1e3] * (STEPS - 1) + [(end - 100) / 1e3])
    assert a.steps.outliers == [STEPS] and a.steps.steps[-1].outlier
    assert any(i.message.startswith(f"step {STEPS} took") for i in a.issues)


def test_a_synchronize_inside_the_last_step_is_its_time(tmp_path):
    """The host waits for the drain inside ProfilerStep#5 (host span 1.71 ms): the next step could not have
    begun before, so nothing is cut; its window is its device work, [S5+100, S5+1700], 1.6 ms, an outlier."""
    a = analyse(tmp_path, sync_in_step=True)
    assert a.steps.steps[-1].time_ms == pytest.approx(1.6)
    assert a.steps.outliers == [STEPS]
    assert not any("the last step's device work" in i.message for i in a.issues)
