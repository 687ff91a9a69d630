"""What the host-side idle rules may claim (issue 27): host_bound only for idle many launches explain, not the
DataLoader's nor a toy's dispatch; a blocking copy whose call and device copy the trace does not link is still
that copy's idle; no long-host-op claim on an event-sampled trace. Each class has its twin; answers placed by
hand in the generated traces."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _a(tmp_path, b):
    return analyze_path(b.write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1)


def _ids(a) -> set[str]:
    return {f.id for f in a.findings}


def _launches(b: TraceBuilder, t: int, n: int, gap: int, dur: int = 5) -> int:
    """n kernels of `dur` µs, each behind `gap` µs of an `aten::add` that launches it at its end: gap µs of
    host-bound idle per kernel. Returns the time after the last kernel."""
    for _ in range(n):
        b.cpu_op("aten::add", t, gap)
        b.kernel("vectorized_elementwise_kernel", t + gap, dur, launch_at=t + gap - 1)
        t += gap + dur
    return t


def _steps(fetch_us: int, n: int, gap: int, steps: int = 3) -> tuple[TraceBuilder, float, float]:
    """Per step: a DataLoader fetch of `fetch_us` (none if 0), then n launches behind `gap` µs each. Returns the
    trace, the step's device window (ms) and its host-bound idle (ms): the window begins at the fetch, or at the
    first kernel where there is none (the first gap is then before it)."""
    b = TraceBuilder(rank=0, world_size=1)
    t = 0
    for k in range(1, steps + 1):
        k0 = t
        if fetch_us:
            b.cpu_op(DL, k0, fetch_us)
        t = _launches(b, k0 + fetch_us, n, gap)
        b.step(k, k0, t + 2)
        t += 2
    lead = 0 if fetch_us else gap
    return b, (fetch_us + n * (gap + 5) - lead) / 1e3, (n * gap - lead) / 1e3


def test_dataloader_idle_is_not_launch_bound(tmp_path):
    """60 launches behind 5 µs each (0.30 ms) after a 2 ms fetch: 87 % of the step idle, only 0.30 ms of it the
    launches'; the DataLoader's finding holds the fetch, and host_bound, where it speaks, claims only the 60 short
    gaps the launches end, never the fetch's 2 ms gap."""
    b, win, hb = _steps(2000, 60, 5)
    a = _a(tmp_path, b)
    r = a.ranks[0]
    assert r.step_time_ms == pytest.approx(win) and r.idle.host_bound_ms == pytest.approx(hb)
    assert r.idle.dataloader_ms == pytest.approx(2.0)
    # 59 short gaps of 5 µs; the first kernel's gap is the fetch's (2 ms, its last 5 µs under the launching op)
    lw = r.idle.launch_wait
    assert lw.wait_ms == pytest.approx(59 * 5e-3) and lw.long_ops_ms == pytest.approx(5e-3)
    assert "dataloader" in _ids(a)
    assert all(f.gain_ms == pytest.approx(hb, abs=1e-3) for f in a.findings if f.id == "host_bound")


def test_launch_bound_twin_fires(tmp_path):
    """The same launches without the fetch: a third of the step waits for them."""
    b, win, hb = _steps(0, 60, 5)
    a = _a(tmp_path, b)
    f = next(f for f in a.findings if f.id == "host_bound")
    assert f.gain_ms == pytest.approx(hb, abs=1e-3) and a.ranks[0].step_time_ms == pytest.approx(win)


@pytest.mark.parametrize("gap,fires", [(100, False), (500, True)])
def test_few_launches_need_more_than_dispatch(tmp_path, gap, fires):
    """7 kernels per step: behind 100 µs each (an eager op's dispatch: a toy), no claim; behind 500 µs each the
    host is slow between launches (claimed, without fusion advice)."""
    b, _, hb = _steps(0, 7, gap)
    a = _a(tmp_path, b)
    assert a.ranks[0].idle.host_bound_ms == pytest.approx(hb)
    assert ("host_bound" in _ids(a)) is fires
    if fires:
        assert "torch.compile(model)" not in next(f for f in a.findings if f.id == "host_bound").action


def _unlinked_copy(blocking_call: bool, linked_call: bool = False) -> tuple[TraceBuilder, float]:
    """Per step: 10 launched kernels (busy to k0+1000), then a 5 ms host-to-device copy: with `blocking_call`
    a `cudaMemcpy` [k0+1000, k0+6000] without a correlation id, and a device Memcpy [k0+5700, k0+5950] whose
    launch no host event records (the link lost); then a kernel launched at the call's end. Without the call,
    `aten::copy_` alone covers the gap. With `linked_call` the cudaMemcpy has its own linked device copy at its
    start and the gap ends with an unlaunched Memset instead. Returns the trace and the idle [k0+1000, k0+5700]
    (ms per step) the unlaunched event ends."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, 4):
        k0 = (k - 1) * 10_000
        for i in range(10):
            b.kernel("gemm_kernel", k0 + 100 * i, 100, launch_at=k0 + 100 * i - 50)
        b.cpu_op("aten::copy_", k0 + 1000, 5000)
        if linked_call:
            b.kernel("Memcpy HtoD (Pageable -> Device)", k0 + 1000, 2, cat="gpu_memcpy", launch_at=k0 + 1000)
            b.events[-2].update(name="cudaMemcpy", dur=5000)
            b.kernel("Memset (Device)", k0 + 5700, 250, cat="gpu_memset", launch=False)
        else:
            if blocking_call:
                b.cpu_op("cudaMemcpy", k0 + 1000, 5000, cat="cuda_runtime")
            b.kernel("Memcpy HtoD (Pageable -> Device)", k0 + 5700, 250, cat="gpu_memcpy", launch=False)
        b.kernel("gemm_kernel", k0 + 6000, 100, launch_at=k0 + 5999)
        b.step(k, k0 - 60, k0 + 6200)
    return b, 4.7 if not linked_call else 4.698  # the linked copy runs [k0+1000, k0+1002]


def test_blocking_copy_without_its_link_is_the_copy(tmp_path):
    b, held = _unlinked_copy(blocking_call=True)
    a = _a(tmp_path, b)
    i = a.ranks[0].idle
    # the gap the lost copy ends, and [k0+5950, k0+6000] until the launched kernel, both under the call
    assert i.runtime_ops["cudaMemcpy"] == pytest.approx(held + 0.05) and i.unattributed_ms == pytest.approx(0.0, abs=1e-6)
    f = next(f for f in a.findings if f.id == "host_sync")
    assert "`cudaMemcpy`" in f.evidence.text and "pin_memory()" in f.action
    assert "host_bound" not in _ids(a)


@pytest.mark.parametrize("linked_call", [False, True])
def test_unlaunched_work_without_a_lost_copy_stays_unattributed(tmp_path, linked_call):
    """Twins: no blocking call at all (only `aten::copy_`), or a blocking copy whose own device copy is linked
    while the gap ends with an unlaunched Memset (hta's a100_16rank step 550): no host op can be said to have
    delayed that work."""
    b, held = _unlinked_copy(blocking_call=False, linked_call=linked_call)
    a = _a(tmp_path, b)
    i = a.ranks[0].idle
    assert i.unattributed_ms == pytest.approx(held)
    assert i.runtime_ms == pytest.approx(0.05 if linked_call else 0.0, abs=1e-6)  # only the call's own tail
    assert not {"host_sync", "host_bound", "host_op_stall"} & _ids(a)


def _long_op(sampled: bool) -> TraceBuilder:
    """Per step 30 launched kernels (~1 ms), then `aten::split_with_sizes` [k0+1000, k0+21000] with no child
    (the device idle 20 ms), then a kernel it launches at its end. `sampled`: the op numbering (External ids)
    has holes of 40 between recorded ops, as an event-sampled trace has."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, 4):
        k0 = (k - 1) * 30_000
        for i in range(30):
            if sampled:
                b._ext += 40
            b.cpu_op("aten::mul", k0 + 30 * i, 20)
            b.kernel("elementwise_kernel", k0 + 30 * i + 25, 30, launch_at=k0 + 30 * i + 19)
        b.cpu_op("aten::split_with_sizes", k0 + 1000, 20_000)
        b.kernel("gemm_kernel", k0 + 21_010, 500, launch_at=k0 + 21_000)
        b.step(k, k0 - 10, k0 + 22_000)
    return b


@pytest.mark.parametrize("sampled", [False, True])
def test_long_host_op_needs_a_complete_trace(tmp_path, sampled):
    a = _a(tmp_path, _long_op(sampled))
    r = a.ranks[0]
    assert (r.idle.op_ids_contiguous < 0.9) is sampled
    assert ("host_op_stall" in _ids(a)) is not sampled
    assert any("holes in its host ops' numbering" in i.message for i in a.issues) is sampled


def _copies(long_in_every_step: bool) -> TraceBuilder:
    """6 steps, each: 5 kernels, then a blocking `cudaMemcpy` whose linked device copy runs at its end, then a
    kernel. The copy holds the device idle 39.9 ms in step 1 (in every step with `long_in_every_step`), 0.1 ms
    in the others."""
    b = TraceBuilder(rank=0, world_size=1)
    k0 = 0
    for k in range(1, 7):
        for i in range(5):
            b.kernel("gemm_kernel", k0 + 100 * i, 100, launch_at=k0 + 100 * i - 50)
        held = 39_900 if (k == 1 or long_in_every_step) else 100
        b.kernel("Memcpy HtoD (Pageable -> Device)", k0 + 500 + held, 100, cat="gpu_memcpy", launch_at=k0 + 500)
        b.events[-2].update(name="cudaMemcpy", dur=held + 100)
        end = k0 + 600 + held
        b.kernel("gemm_kernel", end + 100, 100, launch_at=end + 50)
        b.step(k, k0 - 60, end + 300)
        k0 = end + 1000
    return b


@pytest.mark.parametrize("every", [False, True])
def test_one_off_blocking_copy_gains_the_typical_step(tmp_path, every):
    """One 39.9 ms copy in step 1 of 6 (the first batch's): what a step typically pays is 0.1 ms, so the finding
    is low, its gain the typical step's, its evidence naming the step. The twin pays it every step."""
    a = _a(tmp_path, _copies(every))
    i = a.ranks[0].idle
    assert i.runtime_ops["cudaMemcpy"] == pytest.approx(39.9 if every else (39.9 + 5 * 0.1) / 6)
    f = next(f for f in a.findings if f.id == "host_sync")
    if every:
        assert f.severity == "high" and f.gain_ms == pytest.approx(39.9, abs=1e-3)
    else:
        assert f.severity == "low" and f.gain_ms == pytest.approx(0.1, abs=1e-3) and f.evidence.steps == [1]
        assert "one-off" in f.evidence.text
