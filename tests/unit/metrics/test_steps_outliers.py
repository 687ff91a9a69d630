"""Steps that tell the truth: every step over ranks, the median step, an outlier step named wherever the mean
it moves is printed, and the rules' helper that says whether a quantity concentrates in one step.

The traces are generated with hand-placed kernels, so each step's window, compute, exposed comm and idle
are known here without running the analysis (see `layout`).
"""

from __future__ import annotations

import math
import re
import statistics

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.main import main as cli_main
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.steps import concentrated, outlier_steps, step_span, step_values
from tests.gen.builder import TraceBuilder

WORLD = 4


def layout(durations_us: list[int], rank: int) -> TraceBuilder:
    """Host step k spans [S_k, S_k + D_k]. On the device: compute [S+100, S+D-300], comm [S+D-350, S+D-150+8r]
    (rank r's all-reduce 8r µs longer). So the device window is [S+100, S+D-150+8r]: time D-250+8r, compute
    D-400, exposed comm 150+8r, idle 0."""
    b = TraceBuilder(rank=rank, world_size=WORLD, base_us=1_698_958_767_000_000)
    s = 0
    for k, d in enumerate(durations_us, start=1):
        b.step(k, s, s + d)
        b.kernel("void gemm_kernel<float>()", s + 100, d - 400, stream=7, launch_at=s + 10)
        b.nccl("allreduce", s + d - 350, 200 + 8 * rank, stream=20, launch_at=s + 11, nelems=1 << 20,
               group_size=WORLD, pg_ranks=list(range(WORLD)))
        s += d
    return b


def expected(durations_us: list[int]) -> list[dict]:
    """Per step: median over ranks and the slowest rank, in ms, from the layout above."""
    out = []
    for k, d in enumerate(durations_us, start=1):
        times = [d - 250 + 8 * r for r in range(WORLD)]
        out.append({"step": k, "time_ms": statistics.median(times) / 1e3, "time_max_ms": max(times) / 1e3,
                    "max_rank": WORLD - 1, "compute_ms": (d - 400) / 1e3,
                    "exposed_comm_ms": statistics.median(150 + 8 * r for r in range(WORLD)) / 1e3, "idle_ms": 0.0})
    return out


def folder(tmp_path, durations_us):
    d = tmp_path / "t"
    for r in range(WORLD):
        layout(durations_us, r).write(d / f"rank{r}.json")
    return d


SLOW_LAST = [1000, 1200, 3000]  # step times 0.762 / 0.962 / 2.762 ms: step 3 is 2.87x the median
EVEN = [1000, 1100, 1300]  # 0.762 / 0.862 / 1.062 ms: the longest is 1.23x the median


def test_every_step_over_ranks_and_the_outlier_named(tmp_path):
    a = analyze_path(str(folder(tmp_path, SLOW_LAST)), jobs=1)
    want = expected(SLOW_LAST)
    got = a.steps.steps
    assert [s.step for s in got] == [1, 2, 3]
    for s, w in zip(got, want):
        for k, v in w.items():
            assert getattr(s, k) == pytest.approx(v, abs=1e-9), (s.step, k)
    med = statistics.median(w["time_ms"] for w in want)
    assert a.steps.median_ms == pytest.approx(med)
    assert a.steps.outliers == [3] and [s.outlier for s in got] == [False, False, True]
    assert got[2].ratio == pytest.approx(want[2]["time_ms"] / med)
    compute = step_values(a.ranks, "compute_ms")  # Σ over ranks: 4 × (D - 400) µs
    assert compute == pytest.approx({k: WORLD * (d - 400) / 1e3 for k, d in enumerate(SLOW_LAST, start=1)})
    assert concentrated(compute).step == 3  # 10.4 of 16.0 ms: 65 %, 3.7x the median of the others (2.8)
    (w,) = [i for i in a.issues if i.message.startswith("step 3 took")]
    assert w.severity == "warning" and fmt(want[2]["time_ms"], "ms") in w.message and fmt(med, "ms") in w.message
    assert "steps 1–3" in w.message
    # step 3's excess over the median step (1.8 ms) is all compute (2.6 against 0.8 ms per step)
    assert f"most of the excess is compute ({fmt(2.6, 'ms')} against a median of {fmt(0.8, 'ms')} per step)" in w.message
    # the mean every share divides by is unchanged: the mean over ranks of each rank's mean step
    means = [statistics.fmean(d - 250 + 8 * r for d in SLOW_LAST) / 1e3 for r in range(WORLD)]
    assert a.aggregate.step_time_ms == pytest.approx(statistics.fmean(means))


def test_even_steps_flag_nothing(tmp_path):
    """The silent twin: steps differ by a quarter, no step is named."""
    a = analyze_path(str(folder(tmp_path, EVEN)), jobs=1)
    assert a.steps.outliers == [] and not any(s.outlier for s in a.steps.steps)
    assert not any("took" in i.message for i in a.issues)


def test_summary_terminal_and_report_print_the_same_step(tmp_path):
    d = folder(tmp_path, SLOW_LAST)
    out = tmp_path / "o"
    res = CliRunner().invoke(cli_main, ["analyze", str(d), "--json", str(out / "s.json"), "--report",
                                        str(out / "r.html"), "-j", "1"])
    assert res.exit_code == 0, res.output
    s = orjson.loads((out / "s.json").read_bytes())
    step3 = s["steps"]["steps"][2]
    assert step3["step"] == 3 and step3["outlier"] is True and s["steps"]["outliers"] == [3]
    text, med = fmt(step3["time_ms"], "ms"), fmt(s["steps"]["median_ms"], "ms")
    head = res.output.split("\n\n")[0]
    assert "mean step time" in head and "over ranks and steps 1–3" in head and f"median step {med}" in head
    assert f"step 3 {text}" in head
    row = next(x for x in res.output.splitlines() if re.match(r"^3\s+4\s", x))
    assert text.replace(" ms", "") in row and "outlier" in row
    html = (out / "r.html").read_text()
    m = re.search(r'data-k="steps\.steps\.2\.time_ms"[^>]*>([^<]*)<', html)
    assert m and m.group(1).strip() in (text, text.replace(" ms", ""))
    assert "Step 3 is an outlier" in html and "mean over ranks and steps 1–3" in html
    back = Analysis.from_dict(s)  # the summary reads back with the same steps
    assert back.steps.steps[2].time_ms == step3["time_ms"] and back.steps.outliers == [3]


def test_a_summary_without_steps_is_summarised_the_same_way(tmp_path):
    """A summary written before the step summary existed: outputs compute it from the ranks' own steps."""
    from llmdiag.diagnose.model.steps import steps_of

    a = analyze_path(str(folder(tmp_path, SLOW_LAST)), jobs=1)
    d = a.to_dict()
    d.pop("steps")
    old = Analysis.from_dict(d)
    assert old.steps is None and steps_of(old) == a.steps


# ---- the rules' helper ----------------------------------------------------------------------------------
def test_concentrated_names_the_one_step():
    c = concentrated({4: 251.0, 5: 18.0, 6: 21.0})
    assert c.step == 4 and c.value == 251.0 and c.share == pytest.approx(251 / 290)


@pytest.mark.parametrize("values", [
    {4: 10.0, 5: 11.0, 6: 9.0},  # spread evenly
    {1: 20.0, 2: 10.0},  # 2:1 over two steps is not one step
    {1: 50.0, 2: 50.0, 3: 1.0},  # a tie for the largest
    {1: 60.0, 2: 30.0, 3: 30.0},  # half the total but only 2x the others
    {7: 100.0},  # one step: nothing to concentrate against
    {1: 0.0, 2: 0.0, 3: 0.0},
    {},
])
def test_concentrated_stays_silent(values):
    assert concentrated(values) is None


def test_concentrated_edges():
    assert concentrated({1: 30.0, 2: 10.0}).step == 1  # exactly 3:1 over two steps
    assert concentrated({1: 90.0, 2: math.nan, 3: -5.0, 4: 10.0}).step == 1  # NaN and negatives ignored
    assert concentrated({1: 40.0, 2: 10.0, 3: 10.0}, share=0.7) is None  # 2/3 < the share asked for


def test_outlier_steps_and_spans():
    assert outlier_steps({4: 376.0, 5: 137.0, 6: 222.0}) == [4]  # 376 / 222 = 1.69
    assert outlier_steps({1: 150.0, 2: 100.0, 3: 100.0}) == []  # exactly 1.5x: not over
    assert outlier_steps({1: 100.0, 2: 301.0}) == [2] and outlier_steps({1: 100.0, 2: 290.0}) == []
    assert outlier_steps({1: 100.0}) == []
    assert step_span([6, 4, 5]) == "steps 4–6" and step_span([3]) == "step 3" and step_span([2, 4]) == "steps 2, 4"
    assert step_span([-1]) == "one window (no ProfilerStep)"
