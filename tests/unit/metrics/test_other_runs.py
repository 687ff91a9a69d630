"""What the runs not analysed hold (rules/other_runs.py), on generated folders whose answer the test wrote.

Two runs of one 2-rank job, minutes apart. Each step's device window runs from its first kernel (100 µs in) to
its last kernel's end (1000 µs in): 0.9 ms. In run 1, rank 1's step 4 holds one host op of 2 ms before its last
kernel's launch, so that kernel ends 2 ms later: its window is 2.9 ms, its excess over the median step after
the first (0.9 ms) is 2 ms, the host grew on its critical path and one op holds it all. Run 2 has no such step: analysing run 1, run 2's line
says no outlier step (the silent twin); one run alone has no line at all.
"""

from __future__ import annotations

from pathlib import Path

from tests.gen.builder import gpu_rank
from tests.unit.metrics.test_runs_folders import APART_US, HOST, WALL_US, analyze, summary

STEPS = 6
SLOW_STEP, SLOW_RANK, SLOW_US = 4, 1, 2000


def _write(d: Path, start_us: int, pid0: int, slow: bool, pieces: int = 1, name: str = "slow_python",
           world: int = 2, idle_us: int = 0) -> None:
    """`pieces` host ops share the slow step's 2 ms: one holds the device idle (host_op_stall's stretch), three
    of 0.666 ms each hold none of it alone (the host slower across the step)."""
    for r in range(world):
        b = gpu_rank(r, world_size=world, steps=0, base_us=start_us + 37 * r, pid=pid0 + r)
        k0 = 0
        for k in range(1, STEPS + 1):
            extra = (SLOW_US if slow and r == SLOW_RANK and k == SLOW_STEP else 0) + (idle_us if r == 1 else 0)
            b.step(k, k0, k0 + 1000 + extra)
            b.kernel("void gemm_kernel<float>()", k0 + 100, 600, stream=7, launch_at=k0 + 10)
            b.nccl("allreduce", k0 + 600, 300, stream=20, launch_at=k0 + 11, nelems=1 << 20, group_size=world,
                   pg_ranks=list(range(world)))
            if extra:
                for i in range(pieces):
                    b.cpu_op(f"{name}{i or ''}", k0 + 850 + i * extra // pieces, extra // pieces)
            b.kernel("void tail_kernel()", k0 + 900 + extra, 100, stream=7, launch_at=k0 + 895 + extra)
            k0 += 1000 + extra
        ns = (start_us + 5_000_000 + 1000 * r) * 1000
        b.write(d / f"{HOST}_{pid0 + r}.{ns}.pt.trace.json")


def _lines(s: dict) -> list[str]:
    return [i["message"] for i in s["issues"] if i["message"].startswith("not analysed: run ")]


def test_outlier_step_of_the_run_not_analysed_is_stated(tmp_path):
    d = tmp_path / "two"
    _write(d, WALL_US, 100, slow=True)
    _write(d, WALL_US + APART_US, 200, slow=False)
    res, out = analyze(tmp_path, d)
    s = summary(out)
    one, two = s["runs"]
    assert (one["analysed"], two["analysed"]) == (False, True)
    assert (one["steps"], one["first_step"], one["last_step"]) == (STEPS, 1, STEPS)
    (o,) = one["outliers"]
    assert (o["step"], o["rank"], o["ranks"]) == (SLOW_STEP, SLOW_RANK, 1)
    assert abs(o["time_ms"] - o["median_ms"] - SLOW_US / 1e3) < 1e-6 and abs(o["median_ms"] - 0.9) < 1e-6
    assert (o["held_by"], o["op"], o["category"]) == ("stretch", "slow_python", "")
    assert abs(o["grew_ms"] - 1.95) < 1e-6  # the device idle [900, 2900] µs in the step under the op [850, 2850]
    assert two["outliers"] == []
    (line,) = _lines(s)
    assert line.startswith("not analysed: run 1 (`--run 1` analyses it): 6 steps (#1–#6)")
    assert "outlier step 4 (rank 1): 2.90 ms, +2.00 ms" in line and "under one host op `slow_python`" in line
    assert any(x.startswith("llmdiag: ") and "not analysed: run 1" in x for x in res.stderr.splitlines())
    res, out = analyze(tmp_path, d, "--run", "1")  # the twin: run 2 as the other run has no outlier step
    (line,) = _lines(summary(out))
    assert line.startswith("not analysed: run 2 (") and "; no outlier step; " in line
    assert "outlier step 4" not in line


def test_one_run_has_no_line(tmp_path):
    d = tmp_path / "one"
    _write(d, WALL_US, 100, slow=True)
    res, out = analyze(tmp_path, d)
    s = summary(out)
    assert s["runs"] == [] and _lines(s) == [] and "not analysed" not in res.stderr


def test_headline_numbers_that_differ_are_named(tmp_path):
    """Run 1's mean step over ranks is (0.9 + (6 × 0.9 + 2) / 6) / 2 = 1.067 ms against 0.9 ms: +18.5 % but
    0.17 ms, under DIFFER_MS: not named; the median steps (0.9 ms both) are stated."""
    d = tmp_path / "two"
    _write(d, WALL_US, 100, slow=True)
    _write(d, WALL_US + APART_US, 200, slow=False)
    _, out = analyze(tmp_path, d)
    (line,) = _lines(summary(out))
    assert "median step 0.90 ms against 0.90 ms in run 2" in line
    assert "its mean step, compute, exposed communication and idle within 10% of run 2's" in line


def test_spread_host_growth_is_read_from_the_critical_path(tmp_path):
    """Three ops of 0.666 ms: no stretch holds the excess, the step's own critical path says the host grew (by the
    2 ms the device waited), no op holds half of it: spread over 3 host ops."""
    d = tmp_path / "two"
    _write(d, WALL_US, 100, slow=True, pieces=3)
    _write(d, WALL_US + APART_US, 200, slow=False)
    _, out = analyze(tmp_path, d)
    (o,) = summary(out)["runs"][0]["outliers"]
    assert (o["held_by"], o["category"], o["grown_ops"]) == ("", "cpu_bound", 3)
    assert abs(o["op_grew_ms"] - 0.666) < 1e-6 and abs(o["grew_ms"] - SLOW_US / 1e3) < 0.01
    (line,) = _lines(summary(out))
    assert "on its critical path the host (cpu_bound) grew the most (+2.00 ms), spread over 3 host ops" in line


def test_terminal_and_report_name_it_and_escape_the_op(tmp_path):
    """The header of the terminal and of the report names run 1's outlier step beside `--run N`; the op name,
    from the trace, is text in the report, never markup."""
    from llmdiag.diagnose.analyze import analyze_runs
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.render import render_html

    d = tmp_path / "two"
    _write(d, WALL_US, 100, slow=True, name="<b>evil</b>")
    _write(d, WALL_US + APART_US, 200, slow=False)
    (a,) = analyze_runs(str(d), jobs=1)
    text = render(a, width=400)
    assert "outlier steps there: run 1's step 4 +2.00 ms over its median (see the issues)" in text
    html = render_html(a)
    assert "<b>evil</b>" not in html and "&lt;b&gt;evil&lt;/b&gt;" in html
    assert "outlier steps there: run 1&#39;s step 4 +2.00 ms over its median" in html


def test_a_rank_idle_in_every_step_is_named_in_both_runs(tmp_path):
    """4 ranks; rank 1's host holds each step's last launch 6 ms (a 6 ms op before it), so its device idles
    6 ms in every step (window [100, 6900] µs: gemm, allreduce, then nothing until the tail kernel at 6900),
    the other ranks 0: the median rank's idle is 0, rank 1's 6 ms stands out (≥ 3× and ≥ 5 ms more). Run 2
    the same: "in run 2 too"; a run 2 without it: "no rank stands out so in run 2"; 2 ms: not stated."""
    d = tmp_path / "both"
    _write(d, WALL_US, 100, slow=False, world=4, idle_us=6000)
    _write(d, WALL_US + APART_US, 200, slow=False, world=4, idle_us=6000)
    _, out = analyze(tmp_path, d)
    one = summary(out)["runs"][0]
    assert (one["idle_rank"], one["idle_median_ms"]) == (1, 0.0) and abs(one["idle_rank_ms"] - 6.0) < 1e-6
    (line,) = _lines(summary(out))
    assert "; rank 1 idles 6.00 ms in its median step against 0.00 ms on the median rank (in run 2 too: 6.00 ms)" in line
    d = tmp_path / "first"
    _write(d, WALL_US, 100, slow=False, world=4, idle_us=6000)
    _write(d, WALL_US + APART_US, 200, slow=False, world=4)
    _, out = analyze(tmp_path, d)
    (line,) = _lines(summary(out))
    assert "rank 1 idles 6.00 ms in its median step" in line and "(no rank stands out so in run 2)" in line
    d = tmp_path / "small"
    _write(d, WALL_US, 100, slow=False, world=4, idle_us=2000)
    _write(d, WALL_US + APART_US, 200, slow=False, world=4)
    _, out = analyze(tmp_path, d)
    (line,) = _lines(summary(out))
    assert "idles" not in line
