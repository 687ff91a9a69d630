"""The job's critical path per step, on the timeline, and as printed (metrics/job/critical_path.py), on the
generated jobs of test_job_critical_path.py, against the answers worked out by hand in their docstrings (µs)."""

from __future__ import annotations

import re

import orjson
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.export.timeline import build_timeline
from llmdiag.diagnose.export.tracks import JOB_PATH_PID
from llmdiag.diagnose.export.passthrough import PID_STRIDE
from tests.unit.metrics.test_job_critical_path import GEMM, _job, _offset_steps, _rank, _three_ranks


def test_each_step_has_its_own_path(tmp_path):
    """_offset_steps (hand-worked in its docstring). Step 1: rank 0's 10 ms, the all-reduce both reached
    together (100), rank 0's 5 ms: 15,100, all on rank 0, no wait. Step 2: rank 0's 3 ms, the all-reduce after
    rank 1 arrived (100), rank 1's compute back to the step's start at 15,200 (11,100): 14,200, rank 0 waiting
    on rank 1 for 9,000 (63.4 %). The job's numbers are the steps' together."""
    cp = _job(tmp_path, *_offset_steps()).critical_path
    assert cp is not None
    s1, s2 = cp.per_step
    assert (s1.step, s2.step) == (1, 2)
    assert s1.length_ms == pytest.approx(15.1) and s2.length_ms == pytest.approx(14.2)
    assert s1.gpu_compute_bound == pytest.approx(100 * 15_000 / 15_100, abs=0.05)
    assert s1.gpu_communication_bound == pytest.approx(100 * 100 / 15_100, abs=0.05)
    assert s1.held_by == {"0": pytest.approx(15.1)} and s1.waiting_on == {} and s1.hops == 0
    assert s1.waiting_on_rank == 0
    assert s2.gpu_compute_bound == pytest.approx(100 * 14_100 / 14_200, abs=0.05)
    assert s2.held_by == {"1": pytest.approx(11.1), "0": pytest.approx(3.1)}
    assert s2.waiting_on == {"1": pytest.approx(9.0)} and s2.hops == 1
    assert s2.waiting_on_rank == pytest.approx(100 * 9_000 / 14_200, abs=0.05)
    assert cp.length_ms == pytest.approx((s1.length_ms + s2.length_ms) / 2)
    assert cp.hops == pytest.approx((s1.hops + s2.hops) / 2)


def test_the_per_step_path_survives_the_packed_summary(tmp_path):
    """Above 256 ranks the summary is packed (model/pack.py): the steps read back as they were written."""
    from llmdiag.diagnose.model.summary import analysis_bytes, read_summary
    from tests.unit.model.test_pack_fast import _grow

    a = _grow(_job(tmp_path, *_three_ranks()))
    raw, _ = analysis_bytes(a)
    assert orjson.loads(raw).get("encoding") == "columnar"
    (tmp_path / "s.json").write_bytes(raw)
    back = read_summary(str(tmp_path / "s.json")).critical_path
    assert back == a.critical_path and back.per_step[0].held_by == {"2": pytest.approx(20.0), "1": pytest.approx(8.1),
                                                                    "0": pytest.approx(5.1)}


def _job_slices(tl) -> list[tuple]:
    return [(e["args"]["rank"], e["args"]["category"], e["ts"], e["dur"], e["args"].get("waited_for_rank"))
            for e in tl["traceEvents"] if e.get("pid") == JOB_PATH_PID and e["ph"] == "X"]


def test_timeline_track_marks_the_path_across_ranks(tmp_path):
    """_three_ranks (hand-worked in its docstring): back from rank 0's end, its 5 ms (28,300-33,300), its
    all-reduce after rank 1's arrival (28,200-28,300: the path leaves rank 0 for rank 1 there), rank 1's 8 ms
    (20,200-28,200), its all-reduce with rank 2 after rank 2's arrival (20,100-20,200), rank 2's 20 ms
    (100-20,100). The job's track holds exactly these, in time order, named by category and rank; each rank's
    own llmdiag process holds its part. Times are placed against the ranks' own kernels in the merged trace."""
    for b in _three_ranks():
        b.write(str(tmp_path / f"rank{b.rank}.json"))
    tracks: dict = {}
    a = analyze_path(str(tmp_path), jobs=1, rules=False, tracks=tracks)
    tl = build_timeline(a, tracks)
    # rank 2's first gemm began at 100 µs of its trace: where the merged trace puts 0
    (k,) = [e for e in tl["traceEvents"] if e.get("ph") == "X" and e["name"] == GEMM and e["dur"] == 20_000]
    at = k["ts"] - 100
    want = [(2, "compute", 100, 20_000, None), (1, "comm", 20_100, 100, 2), (1, "compute", 20_200, 8_000, None),
            (0, "comm", 28_200, 100, 1), (0, "compute", 28_300, 5_000, None)]
    got = _job_slices(tl)
    assert [(r, c, pytest.approx(ts - at, abs=0.01), pytest.approx(d, abs=0.01), w) for r, c, ts, d, w in got] == want
    names = [e["name"] for e in tl["traceEvents"] if e.get("pid") == JOB_PATH_PID and e["ph"] == "X"]
    assert names[:2] == ["job critical path: compute (rank 2)", "job critical path: comm (rank 1, waited for rank 2)"]
    own = [e for e in tl["traceEvents"] if e.get("pid") == 1 * PID_STRIDE and e.get("ph") == "X"
           and e["name"].startswith("job critical path")]
    assert sorted(round(e["ts"] - at) for e in own) == [20_100, 20_200]
    # only the ranks shown: the track keeps their stretches
    assert {x[0] for x in _job_slices(build_timeline(a, tracks, ranks=[0, 2]))} == {0, 2}


def test_timeline_track_stays_bounded(tmp_path):
    """Four steps of four ranks with a straggler (test_job_critical_path._planted): per step the path is rank
    0's tail, the all-reduce, rank 3's compute: three stretches a step whatever the ranks, and adjacent stretches
    of one rank and category are merged (never two touching slices of one rank and category)."""
    from tests.unit.metrics.test_job_critical_path import _planted

    for r in range(4):
        _planted(r, True).write(str(tmp_path / f"rank{r}.json"))
    tracks: dict = {}
    a = analyze_path(str(tmp_path), jobs=1, rules=False, tracks=tracks)
    got = _job_slices(build_timeline(a, tracks))
    assert len(got) == 3 * 4
    assert [x[:2] for x in got[:3]] == [(3, "compute"), (0, "comm"), (0, "compute")]
    for x, y in zip(got, got[1:]):
        assert not (x[0] == y[0] and x[1] == y[1] and x[2] + x[3] == pytest.approx(y[2]))


def _hand_made(tmp_path, length_ms: float, waits: dict[str, float]):
    from llmdiag.diagnose.model.analysis import Analysis

    d = _job(tmp_path, _rank(0, 10_000, 5_000), _rank(1, 30_000, 3_000)).to_dict()
    d["critical_path"]["length_ms"] = length_ms
    d["critical_path"]["waiting_on"] = waits
    return Analysis.from_dict(d)


@pytest.mark.parametrize("length, waits, shown", [
    (1094.25, {"0": 0.07}, []),  # sst_sleep_pl_dense_after_backward_2: within the kernels' start, 0.0 % of the path
    (1094.25, {"3": 0.5, "0": 0.07}, ["3"]),  # above 0.1 ms: named, the 0.07 ms one left out
    (2.0, {"1": 0.05}, ["1"]),  # 2.5 % of a short path: named
])
def test_text_leaves_out_waits_below_the_floor(tmp_path, length, waits, shown):
    """The terminal and the report name a wait only from 0.1 ms or 1 % of the path; the summary keeps all."""
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.render import render_html

    a = _hand_made(tmp_path, length, waits)
    text = " ".join(render(a, width=200).split())
    para = re.sub(r"<[^>]+>", "", render_html(a).split('id="job-critical-path"')[1].split("</p>")[0])
    for out in (text, " ".join(para.split())):
        tail = out.split("waited on per step:")[1].split(" The job's")[0] if "waited on per step:" in out else ""
        named = re.findall(r"rank (\d+) [\d.]+ ms", tail)
        assert sorted(named) == sorted(shown)
        if not shown:
            assert "No rank on it waited for another at a collective for 0.1 ms or a hundredth of the path" in out
    assert a.critical_path.waiting_on == waits


def test_terminal_fits_80_columns_and_says_the_summarys_numbers(tmp_path):
    """At 80 columns no line of the job's paragraph is wider (characters, not bytes: the ms and % signs), and
    its numbers are the summary's, as the terminal formats them."""
    from llmdiag.diagnose.cli.terminal import render

    a = _job(tmp_path, *_three_ranks())
    text = render(a, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    para = flat.split("Job critical path (")[1].split("The job's critical path (")[0]
    cp = a.critical_path
    held = {r: float(x) for r, x in re.findall(r"rank (\d+) for ([\d.,]+) ms", para)}
    assert held == {r: round(v, 2) for r, v in cp.held_by.items()}
    waited = {r: float(x) for r, x in re.findall(r"rank (\d+) ([\d.,]+) ms", para.split("waited on per step:")[1])}
    assert waited == {r: round(v, 2) for r, v in cp.waiting_on.items()}
    assert f"{cp.length_ms:.2f} ms per step" in para
    assert f"compute {cp.gpu_compute_bound:.1f} %" in para and f"{cp.waiting_on_rank:.1f} % of it" in para
