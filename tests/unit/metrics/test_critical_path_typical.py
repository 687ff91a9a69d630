"""The typical step's path beside the mean (model/critical_path.typical_step): where one step is far longer than
the others (an allocator storm, a host stall), the rank's and the job's mean split is weighted by that step's
cause, so the median-length step's split is stated too. Answers worked out by hand in the docstrings (µs)."""

from __future__ import annotations

import re

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.model.critical_path import CriticalPath, JobStepPath, typical_step
from tests.gen.builder import TraceBuilder

# (step, ProfilerStep start, kernel time): a 0.8 ms and a 0.82 ms step around step 2 (see _steps)
STALL = 1_500  # the host op between step 2's two kernels, nothing recorded inside it


def _steps(stall: bool) -> TraceBuilder:
    """Three ProfilerSteps 3,000 µs apart. Steps 1 and 3: `aten::mm` (10-110 into the step) launches one kernel at
    50 that runs from 60 for 800 µs (step 1) or 820 µs (step 3). Step 2 with `stall`: the same mm launches a 400 µs
    kernel (60-460); the thread then sits in `aten::stall` (120-1,620), and a second mm (1,630-1,730) launches at
    1,650 a 400 µs kernel that runs 1,660-2,060. Without: step 2 is as step 1 (800 µs)."""
    b = TraceBuilder()
    for n, kernel_us in ((1, 800), (2, 400 if stall else 800), (3, 820)):
        t = (n - 1) * 3_000
        b.step(n, t, t + 2_500)
        b.cpu_op("aten::mm", t + 10, 100)
        b.kernel("K", t + 60, kernel_us, launch_at=t + 50)
        if stall and n == 2:
            b.cpu_op("aten::stall", t + 120, STALL)
            b.cpu_op("aten::mm", t + 1_630, 100)
            b.kernel("K", t + 1_660, 400, launch_at=t + 1_650)
    return b


def _rank(tmp_path, stall: bool):
    out = run_job(RankJob(_steps(stall).write(str(tmp_path / "r0.json"))))
    assert out.error is None, out.error
    return out.metrics


def test_one_long_step_with_a_host_stall_gets_the_typical_split(tmp_path):
    """Steps 1 and 3: the kernel alone, 800 and 820 (compute 100 %). Step 2's device window [60, 2,060] (2,000):
    back from the second kernel's end, its 400 of compute (1,660-2,060), the launch delay 1,650-1,660 (10; the
    stream was idle since 460), the launch 20 into the second mm (1,630-1,650: host op 20), the 10 between the
    stall's end and that mm (unprofiled host gap), the stall (120-1,620: host op 1,500), the 10 between the first
    mm's end and the stall, the first mm back to the window's start (60-110: 50). 2,000: compute 400, launch 10,
    cpu 1,590. The mean: (800 + 2,000 + 820) / 3 = 1,206.667, cpu 1,590 / 3,620 = 43.9 %. The longest (2,000) is
    2.4x the median step's (step 3: 820), so the typical step is step 3: 0.82 ms, compute 100 %."""
    m = _rank(tmp_path, True)
    assert [s.critical_path.length_ms for s in m.steps] == pytest.approx([0.8, 2.0, 0.82])
    long = m.steps[1].critical_path
    assert long.cpu_bound == pytest.approx(100 * 1_590 / 2_000, abs=0.05)
    assert long.gpu_kernel_launch_overhead == pytest.approx(100 * 10 / 2_000, abs=0.05)
    cp = m.critical_path
    assert cp.length_ms == pytest.approx(3.62 / 3, abs=1e-3)  # the headline stays the mean
    assert cp.length_ms == pytest.approx(m.step_time_ms, abs=1e-3)
    assert cp.cpu_bound == pytest.approx(100 * 1_590 / 3_620, abs=0.05)
    t = cp.typical
    assert t is not None and t.step == 3 and t.length_ms == pytest.approx(0.82)
    assert t.gpu_compute_bound == 100 and t.cpu_bound == 0 and t.gpu_kernel_launch_overhead == 0


def test_even_steps_get_no_typical_field(tmp_path):
    """The twin: step 2 as step 1 (800, 800, 820): the longest is 1.03x the median, no typical step."""
    m = _rank(tmp_path, False)
    assert [s.critical_path.length_ms for s in m.steps] == pytest.approx([0.8, 0.8, 0.82])
    assert m.critical_path is not None and m.critical_path.typical is None


def _p(ms: float, cpu: float) -> CriticalPath:
    return CriticalPath(ms, cpu, 100 - cpu, 0, 0, 0)


@pytest.mark.parametrize("steps, want", [
    ([(4, _p(378.8, 60)), (5, _p(133.9, 20)), (6, _p(166.3, 18))], 6),  # median 166.3; 378.8 is 2.3x it
    ([(4, _p(150, 60)), (5, _p(100, 20)), (6, _p(140, 18))], None),  # 150 < 1.5 x 140
    ([(1, _p(100, 1)), (2, _p(300, 1)), (3, _p(110, 1)), (4, _p(105, 1))], 4),  # even: the lower middle (105)
    ([(1, _p(100, 1)), (2, _p(300, 1))], None),  # two steps: neither is the typical one
])
def test_typical_step_is_the_median_length_one(steps, want):
    t = typical_step(steps)
    assert (t.step if t is not None else None) == want
    if t is not None:
        src = dict(steps)[want]
        assert (t.length_ms, t.cpu_bound, t.gpu_compute_bound) == (src.length_ms, src.cpu_bound, src.gpu_compute_bound)


def test_the_jobs_first_step_is_no_candidate():
    """The job's first step starts at its ranks' earliest start, not at a previous step's end (torchrec qcomm: #4
    191.14 ms against 143-149 ms on every rank, a late rank's lead-in): `skip_first` chooses among the rest (the
    lower middle of 397.32 and 145.90: #6), the ratio still read over all three (397.32 ≥ 1.5 x 145.90)."""
    steps = [(4, _p(191.14, 45)), (5, _p(397.32, 67)), (6, _p(145.90, 12))]
    assert typical_step(steps).step == 4 and typical_step(steps, skip_first=True).step == 6
    even = [(4, _p(191.14, 45)), (5, _p(150.0, 20)), (6, _p(145.90, 12))]  # 191.14 < 1.5 x 145.90: none
    assert typical_step(even, skip_first=True) is None


def test_job_steps_choose_the_same_way():
    """The job's per_step (JobStepPath: the waits add nothing to the choice or to the five shares kept)."""
    steps = [JobStepPath(397.99, 70, 25, 5, 0, 0, step=4, waiting_on_rank=3),
             JobStepPath(142.82, 20, 70, 10, 0, 0, step=5), JobStepPath(161.77, 25, 63, 12, 0, 0, step=6)]
    t = typical_step([(s.step, s) for s in steps])
    assert t is not None and t.step == 6 and t.length_ms == 161.77 and t.gpu_compute_bound == 63
    assert not hasattr(t, "waiting_on_rank")


@pytest.mark.parametrize("width", [80, 160])
def test_terminal_and_report_print_it_beside_the_mean(tmp_path, width):
    """The terminal's critical-path section and the report's say the mean and the typical step's split, with
    the summary's numbers; no line wider than the terminal."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.render import render_html

    _steps(True).write(str(tmp_path / "rank0.json"))
    a = analyze_path(str(tmp_path), jobs=1, rules=False)
    text = render(a, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    assert "Rank 0: mean 1.21 ms over 3 steps; typical step #3: 0.82 ms (compute 100.0 %)." in flat
    html = " ".join(re.sub(r"<[^>]+>", "", render_html(a).split('id="critical-path-typical"')[1]
                           .split("</ul>")[0]).split())
    assert "Rank 0: mean" in html and "typical step #3:" in html and "compute 100" in html


def _job_steps(compute_us: tuple[int, int, int]) -> list[TraceBuilder]:
    """Two ranks, three steps 50,000 µs apart. In step s (base B): both ranks compute compute_us[s-1] from B+100
    (launched at B+50), all-reduce for 100 from its end (arriving together), then rank 0 runs a 1,000 tail and
    rank 1 a 500 one from the all-reduce's end."""
    from tests.unit.metrics.test_job_critical_path import _ar, _gemm, _ranks

    bs = _ranks(2, [(s, (s - 1) * 50_000, (s - 1) * 50_000 + 40_000) for s in (1, 2, 3)])
    for s, c in zip((1, 2, 3), compute_us):
        base = (s - 1) * 50_000
        for b, tail in zip(bs, (1_000, 500)):
            _gemm(b, base + 100, c, base + 50)
            _ar(b, base + 100 + c, base + 200 + c, base + 60, "0", [0, 1])
            _gemm(b, base + 200 + c, tail, base + 70, "void adam_kernel<float>()")
    return bs


def test_job_path_gets_the_typical_step_and_its_even_twin_none(tmp_path):
    """Each step's path: rank 0's tail (1,000), the all-reduce both reached together (100), rank 0's compute back
    to the step's start (c): c + 1,100. Computes 8,000, 20,000, 9,000: 9.1, 21.1, 10.1 ms; the median step is
    step 3 (10.1 ms: compute 10,000 / 10,100 = 99.0 %, communication 1.0 %), the longest 2.09x it: typical. The
    twin (8,000 each: 9.1 ms thrice) has none. The terminal's job paragraph says it."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.cli.terminal import render

    for b in _job_steps((8_000, 20_000, 9_000)):
        b.write(str(tmp_path / "uneven" / f"rank{b.rank}.json"))
    a = analyze_path(str(tmp_path / "uneven"), jobs=1, rules=False)
    cp = a.critical_path
    assert cp is not None and [s.length_ms for s in cp.per_step] == pytest.approx([9.1, 21.1, 10.1])
    assert cp.length_ms == pytest.approx(40.3 / 3, abs=1e-3)
    t = cp.typical
    assert t is not None and t.step == 3 and t.length_ms == pytest.approx(10.1)
    assert t.gpu_compute_bound == pytest.approx(99.0) and t.gpu_communication_bound == pytest.approx(1.0)
    flat = " ".join(render(a, width=80).split())
    assert ("That is the mean over 3 steps of unequal length; typical step #3: 10.10 ms (compute 99.0 %, comm "
            "1.0 %), run on rank 0 for 10.10 ms.") in flat
    for b in _job_steps((8_000, 8_000, 8_000)):
        b.write(str(tmp_path / "even" / f"rank{b.rank}.json"))
    even = analyze_path(str(tmp_path / "even"), jobs=1, rules=False).critical_path
    assert even is not None and [s.length_ms for s in even.per_step] == pytest.approx([9.1] * 3)
    assert even.typical is None
