"""A host busy the whole step that never waits on its device sets the step: the device's queued work, finished long
before the host next touches the device, is slack, not the path (kineto resnet50 num_workers=0: host threads busy
~91 % of each step, no wait on the device, each step's device work done 31-35 ms before the next step's first
launch; the path read 64 % gpu_compute_bound). The twin: the next step's first launch follows the previous
step's device work within a moment (the host feeding its device), and the path still runs back through that work
(critical_path/ahead.py). Answers worked out by hand in each docstring from the times placed (µs; launch calls
last 1 µs); they hold on the ranks' own paths (`critical_path`, not the `--hta-compat` one).
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _loop(fetch: int, steps: int = 3, work: bool = True) -> TraceBuilder:
    """Per step k (k0 = (k-1)·P, P = fetch + 6000), on the main thread: ProfilerStep#k k0..k0+P; the DataLoader's
    `__next__` k0..k0+fetch (no launch; its work an aten::div_ of 450 µs every 500 µs); aten::fwd for 2000 µs after it, launching KF1 at +100 (runs +200..+800),
    KF2 at +700 (+800..+1400: queued behind KF1), KF3 at +1450 (+1500..+1800: 50 µs after KF2 ended); aten::bwd
    1000 µs, launching KB1 at +100 (+200..+3200) and KB2 at +200 (+3200..+5500: queued); aten::opt 3000 µs,
    launching KO at +100 (queued behind KB2: +4500..+4600), all on stream 7. Times after `+` count from the op's
    begin; no host thread is silent 1 ms inside an op where a kernel ends just before its next point (resume.py). Each step's device work ends 1600 µs into the next step; the next step's KF1 is launched at
    fetch + 100 into it: fetch - 1500 µs after the stream went idle. `work=False`: `__next__` records no op."""
    b = TraceBuilder()
    p = fetch + 6000
    for k in range(1, steps + 1):
        k0 = (k - 1) * p
        f, w, o = k0 + fetch, k0 + fetch + 2000, k0 + fetch + 3000
        b.step(k, k0, k0 + p)
        b.cpu_op(NEXT, k0, fetch)
        for j in range(fetch // 500 if work else 0):  # the fetch's own work: decoding, augmenting
            b.cpu_op("aten::div_", k0 + 500 * j, 450)
        b.cpu_op("aten::fwd", f, 2000)
        b.kernel("KF1", f + 200, 600, launch_at=f + 100)
        b.kernel("KF2", f + 800, 600, launch_at=f + 700)
        b.kernel("KF3", f + 1500, 300, launch_at=f + 1450)
        b.cpu_op("aten::bwd", w, 1000)
        b.kernel("KB1", w + 200, 3000, launch_at=w + 100)
        b.kernel("KB2", w + 3200, 2300, launch_at=w + 200)
        b.cpu_op("aten::opt", o, 3000)
        b.kernel("KO", o + 4500, 100, launch_at=o + 100)
    return b


def _steps(tmp_path, b: TraceBuilder):
    out = run_job(RankJob(b.write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def _check(cp, length, compute, launch):
    """`cp` (a step's CriticalPath) is `length` µs: `compute` of it the kernels', `launch` their launch delays, the
    rest the host's."""
    assert cp.length_ms == pytest.approx(length / 1000)
    assert cp.gpu_compute_bound == pytest.approx(100 * compute / length, abs=0.05)
    assert cp.gpu_kernel_launch_overhead == pytest.approx(100 * launch / length, abs=0.05)
    assert cp.cpu_bound == pytest.approx(100 * (length - compute - launch) / length, abs=0.05)
    assert cp.gpu_kernel_kernel_overhead == 0 and cp.gpu_communication_bound == 0


def test_host_saturated_step_is_the_hosts(tmp_path):
    """fetch 4000 (P = 10000): each step's device work ends at k0+11600, the next KF1 is launched at k0+14100,
    2500 µs later, the host busy in `__next__` all along. Windows (steps.py: device spans, begun at the fetch):
    [0, 11600], [11600, 21600], [21600, 31600].

    Step 3 (the last: nothing after it says what waited on its device work), back from KO's end (31600): KO, KB2,
    KB1 31600-26200 (compute 5400), KB1's launch (100), aten::bwd 26100-26000 (host 100), aten::fwd from its end
    back to KF3's launch end 26000-25451 (549), the launch (1), the return to KF2's end (ahead.py: KF3 waited on its
    launch 50 µs after KF2, which had queued) 25450-25400 (host 50), KF2 and KF1 25400-24200 (compute 1200), KF1's
    launch (100), aten::fwd 24100-24000 (host 100), `__next__` back to the window's start 24000-21600 (2400):
    compute 6600, launch 200, host 3200.

    Step 2 goes on where that walk crossed into it, inside `__next__` of step 3 (KF1's late launch does not send
    the walk back to KO of step 2, which ended 2500 µs before with the host running `__next__`'s ops, a point
    350 µs after KO's end and no runtime call until KF1's launch): `__next__` 21600-20000 (1600), aten::opt 20000-17000 (3000, its launch of KO included),
    aten::bwd 17000-16000 (1000), aten::fwd 16000-15450 (550), the return to KF2's end (50), KF2 and KF1
    15400-14200 (compute 1200), KF1's launch (100), aten::fwd 14100-14000 (100), `__next__` 14000-11600 (2400):
    compute 1200, launch 100, host 8700 of 10000. Step 1 alike, its `__next__` from 0: 11600 µs, compute 1200,
    launch 100, host 10300. Before, every step read as step 3 (host 32 %): KB1 and KB2 are 5300 µs of each
    step's device time that nothing waited on."""
    m = _steps(tmp_path, _loop(4000))
    s1, s2, s3 = m.steps
    _check(s1.critical_path, 11600, 1200, 100)
    _check(s2.critical_path, 10000, 1200, 100)
    _check(s3.critical_path, 10000, 6600, 200)
    assert m.critical_path.cpu_bound == pytest.approx(100 * (10300 + 8700 + 3200) / 31600, abs=0.05)


def test_host_feeding_its_device_keeps_the_devices_path(tmp_path):
    """The twin, fetch 2000 (P = 8000): the next KF1 is launched 600 µs after the previous step's KO ended, so
    the host was ahead of its device until then (ahead.py) and the walk that reaches the end of `__next__`'s
    aten::div_ 1500-1950 µs into the step goes back to KO, as before. Windows [0, 9600], [9600, 17600], [17600, 25600]. Step 2 back from its KO's end (17600):
    compute 5400 (KO, KB2, KB1), KB1's launch 100, aten::bwd 100, aten::fwd 549 + 1 + 50 (to KF2's end), KF2 and
    KF1 1200, KF1's launch 100, aten::fwd 100, `__next__` from its end (12000) back to the return to step 1's KO
    (9600): 400 (host). 8000 µs: compute 6600, launch 200, host 1200 (step 3 alike)."""
    m = _steps(tmp_path, _loop(2000))
    _check(m.steps[1].critical_path, 8000, 6600, 200)
    _check(m.steps[2].critical_path, 8000, 6600, 200)


def test_silent_host_keeps_the_devices_path(tmp_path):
    """The other twin: fetch 4000 with nothing recorded inside `__next__` (a thread silent 1 ms or more was waiting,
    not working: resume.py; nccl_data's main thread blocked 17 ms in loss.backward()). Its first point after step
    2's KO ended (21600) is `__next__`'s end, 2400 µs later, so the walk returns to KO there, as before: step 2
    reads as step 3 of the first test, compute 6600, launch 200, host 3200 of 10000; step 1 (from 0, KF1 without a
    stream predecessor) host 4000 + 800, compute 6600, launch 200 of 11600."""
    m = _steps(tmp_path, _loop(4000, work=False))
    _check(m.steps[0].critical_path, 11600, 6600, 200)
    _check(m.steps[1].critical_path, 10000, 6600, 200)
