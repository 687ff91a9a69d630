"""Step counts as an attack (issue 35, medium 6 and low "one warning per outlier step").

Before: one CPU rank with 100,000 ProfilerSteps (a 1.4 MB gzip) took 1.2 GB and wrote a 141 MB report (a table
row and an SVG bar per step) and an 85 MB summary, with one warning per outlier step. Now the per-step rows
above 200 are cut in the model (model/step_cap.py: the first, the last, the median and the slowest steps),
after every number over steps was computed; the summary says how many steps there were, the report and the
terminal say what is shown, and outlier steps past the 10 slowest are one warning.

The trace is built here with its answer known: N steps of 1 ms, every 1,000th 5 ms (an outlier), one 0.4 ms op
in each step, so the mean step is (N + 4·N/1000) / N ms and the median step 1 ms.
"""

from __future__ import annotations

import orjson

from llmdiag.diagnose.model.step_cap import MAX_STEP_ROWS
from tests.adversarial.conftest import attack, check
from tests.gen.builder import MAIN_TID, TraceBuilder

N = 20_000


def _steps_trace(path, n: int = N) -> None:
    b = TraceBuilder(rank=0, world_size=1, backend="gloo")
    b.thread_name(MAIN_TID, "pt_main_thread")
    t = 0
    for k in range(1, n + 1):
        dur = 5000 if k % 1000 == 0 else 1000
        b.step(k, t, t + dur)
        b.cpu_op("aten::mm", t + 100, 400)
        t += dur
    b.write(path, gz=True)


def test_many_steps_are_summarised_not_listed(tmp_path):
    d = tmp_path / "run"
    _steps_trace(d / "rank0.json.gz")
    s, h = tmp_path / "s.json", tmp_path / "r.html"
    r = attack("analyze", d, "--json", s, "--report", h, "--tables", tmp_path / "t", "--format", "csv", cwd=tmp_path)
    check(r, 0, one_line=False)
    assert s.stat().st_size < 1 << 20 and h.stat().st_size < 2 << 20  # 12 MB and 25 MB before, at 20,000 steps
    doc = orjson.loads(s.read_bytes())
    st = doc["steps"]
    assert st["total"] == N and len(st["steps"]) == MAX_STEP_ROWS and doc["ranks"][0]["steps_total"] == N
    assert len(doc["ranks"][0]["steps"]) == MAX_STEP_ROWS
    kept = [x["step"] for x in st["steps"]]
    assert kept[0] == 1 and kept[-1] == N and set(st["outliers"]) == set(range(1000, N + 1, 1000))  # all 20 shown
    assert abs(doc["aggregate"]["step_time_ms"] - (N + 4 * N / 1000) / N) < 1e-6  # over every step, not the kept
    assert st["median_ms"] == 1.0
    assert f"{N:,} steps: {MAX_STEP_ROWS} are shown" in h.read_text() and f"{N:,} steps" in r.stdout
    step_warnings = [i for i in doc["issues"] if "outlier step" in i["message"] or i["message"].startswith("step ")]
    assert len(step_warnings) == 11 and "10 more outlier steps" in step_warnings[-1]["message"]
    assert sum(1 for _ in open(tmp_path / "t" / "steps.csv")) == MAX_STEP_ROWS + 1
    # read back: the gate and the diff see the same per-step means (nsteps from steps_total)
    check(attack("check", s, "--baseline", s, cwd=tmp_path), 0, one_line=False)
    check(attack("diff", s, s, "--html", tmp_path / "d.html", cwd=tmp_path), 0, one_line=False)
