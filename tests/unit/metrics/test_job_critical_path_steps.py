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
from tests.unit.metrics.test_job_critical_path import GEMM, _ar, _gemm, _job, _offset_steps, _rank, _ranks, _three_ranks


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


def _flush(resume_at: int) -> list:
    """Two ranks, one step. Rank 0 computes 2 ms (100-2,100) and reaches the all-reduce at 2,100; its host then
    sits in `aten::cat` (from 2,200 to resume_at + 150) with nothing recorded after a `cudaMalloc` (2,210-2,300)
    until a `cudaFree` at `resume_at` (120 µs), then launches 5 ms of compute at resume_at + 140 that begins 10 µs
    later (for resume_at 30,250: 30,400-35,400). Rank 1
    computes 30 ms and reaches the all-reduce at 30,100; it ends at 30,200 on both. An allocator flush: the
    failed malloc's unrecorded synchronize waits for the device, here for the all-reduce, so the host resumes
    just after it ends."""
    b0, b1 = _ranks(2)
    _gemm(b0, 100, 2_000, 50)
    _ar(b0, 2_100, 30_200, 60, "0", [0, 1])
    b0.cpu_op("aten::cat", 2_200, resume_at + 150 - 2_200)
    b0.cpu_op("cudaMalloc", 2_210, 90, cat="cuda_runtime")
    b0.cpu_op("cudaFree", resume_at, 120, cat="cuda_runtime")
    _gemm(b0, resume_at + 150, 5_000, resume_at + 140)
    _gemm(b1, 100, 30_000, 50)
    _ar(b1, 30_100, 30_200, 60, "0", [0, 1])
    _gemm(b1, 30_200, 1_000, 70)
    return [b0, b1]


def test_a_host_waiting_unrecorded_through_a_collective_leaves_the_path_to_the_late_rank(tmp_path):
    """_flush with the cudaFree 50 µs after the all-reduce ends. Back from rank 0's end (35,400): its 5 ms of
    compute, its host from the cudaFree to the launch and the resume's 50 µs lag (30,200-30,400: 200), the
    all-reduce after rank 1's arrival (30,100-30,200: 100), then rank 1's compute back to 100 (30,000). Length
    35,300: compute 35,000, communication 100, host and launch 200. Rank 0 waited on rank 1 from 2,100 to
    30,100 (28,000). Rank 0's own path holds its 28 ms in aten::cat as host time: the job's path must not."""
    cp = _job(tmp_path, *_flush(30_250)).critical_path
    assert cp is not None
    assert cp.length_ms == pytest.approx(35.3) and cp.hops == 1
    assert cp.held_by == {"1": pytest.approx(30.0), "0": pytest.approx(5.3)}
    assert cp.waiting_on == {"1": pytest.approx(28.0)}
    assert cp.gpu_compute_bound == pytest.approx(100 * 35_000 / 35_300, abs=0.05)
    assert cp.gpu_communication_bound == pytest.approx(100 * 100 / 35_300, abs=0.05)
    assert cp.cpu_bound + cp.gpu_kernel_launch_overhead == pytest.approx(100 * 200 / 35_300, abs=0.1)


def test_a_host_busy_past_the_collective_keeps_the_path(tmp_path):
    """The twin: the cudaFree 1.3 ms after the all-reduce ended (31,500): no wait on it ends there, the host's
    stretch is its own, and the path stays on rank 0 (nothing crossed, no wait on rank 1)."""
    cp = _job(tmp_path / "busy", *_flush(31_500)).critical_path
    assert cp is not None
    assert cp.hops == 0 and cp.waiting_on == {} and list(cp.held_by) == ["0"]


@pytest.mark.real("torchrec/sst_sleep_pl_dense_after_backward_2")
def test_real_rank_that_waited_through_an_all_to_all_does_not_hold_the_path():
    """TorchRec's sst_sleep_pl_dense_after_backward_2, ProfilerStep#5, read with plain gzip/json: rank 3's longest
    NCCL kernel of the step (its all_to_all) ends with the other ranks' (within 0.5 ms) and began before theirs
    only on rank 2 last (rank 2 arrived last), and rank 3's host thread recorded nothing for over a millisecond
    up to a point within 100 µs after that kernel's end (the allocator flush: a `cudaFree`). Rank 3 waited; the
    job's path in that step must run on rank 2 from the step's start to its arrival, with rank 3 waiting on rank
    2 from its own arrival to rank 2's, and hold rank 3 for no more than its step after rank 2's arrival.
    (Before the cut, critical_path/cuts.py, rank 3 held the whole step, 1,160 ms.)"""
    import gzip
    import json
    from pathlib import Path

    from tests.conftest import REAL

    folder = Path(REAL) / "torchrec" / "sst_sleep_pl_dense_after_backward_2"
    ev = {}
    for f in sorted(folder.glob("*.json.gz")):
        t = json.load(gzip.open(f))
        ev[t["distributedInfo"]["rank"]] = t["traceEvents"]
    step = {r: next((e["ts"], e["ts"] + e["dur"]) for e in xs if e.get("name") == "ProfilerStep#5") for r, xs in ev.items()}
    nccl = {r: [(e["ts"], e["ts"] + e["dur"]) for e in xs if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
            for r, xs in ev.items()}
    a3, e3 = max((k for k in nccl[3] if step[3][0] <= k[0] < step[3][1]), key=lambda k: k[1] - k[0])
    peers = {r: min(ks, key=lambda k: abs(k[1] - e3)) for r, ks in nccl.items()}
    assert all(abs(k[1] - e3) <= 500 for k in peers.values())
    late = max(peers, key=lambda r: peers[r][0])
    assert late == 2 and peers[2][0] - a3 > 1e5  # rank 3 waited ~1 s for rank 2
    main_tid = next(e["tid"] for e in ev[3] if e.get("name") == "ProfilerStep#5")
    pts = sorted(p for e in ev[3] if e.get("ph") == "X" and e.get("tid") == main_tid and e.get("cat") in (
        "cpu_op", "cuda_runtime", "user_annotation") for p in (e["ts"], e["ts"] + e["dur"]))
    resumes = [b for a, b in zip(pts, pts[1:]) if b - a >= 1000 and e3 <= b <= e3 + 100 and a < e3]
    assert resumes  # rank 3's host came back just after the all_to_all ended

    a = analyze_path(str(folder), jobs=1, rules=False)
    s5 = next(s for s in a.critical_path.per_step if s.step == 5)
    assert s5.waiting_on["2"] == pytest.approx((peers[2][0] - a3) / 1000, rel=1e-3)
    # the job's step 5 begins where its step 4 ended last (rank 2's ProfilerStep#4; its device window within 1 ms)
    begin = max(e["ts"] + e["dur"] for xs in ev.values() for e in xs if e.get("name") == "ProfilerStep#4")
    assert s5.held_by["2"] >= (peers[2][0] - begin) / 1000 - 1.0
    # rank 3: the all_to_all's transfer after rank 2's arrival and its own work after it, nothing before
    assert s5.held_by.get("3", 0.0) <= (step[3][1] - peers[2][0]) / 1000 + 1.0


TORCHREC = ("torchrec/sst_long_a2a_optimizer_3", "torchrec/sst_long_a2a_optimizer_5",
            "torchrec/sst_sleep_pl_dense_after_backward_2")


@pytest.mark.real(*TORCHREC)
@pytest.mark.parametrize("name", TORCHREC)
def test_real_steps_tile_the_job(name):
    """Each step's path is as long as the job's step: from the previous step's end (the first: the ranks'
    earliest window start) to its ranks' latest window end, the windows (RankMetrics.steps) on the common clock.
    In these captures one rank begins its windows ~12 ms after the others (a late capture): where the path
    reaches it, the time before its window is still the step's, on that rank's host (without it the path fell
    12-14 ms short of the step). Within 0.1 ms: the ranks' own walks (hops.py) lose up to ~50 µs a step where a
    device clock runs behind the host's (kernels beginning before their launch in these V100 captures)."""
    from pathlib import Path

    from tests.conftest import REAL

    a = analyze_path(str(Path(REAL) / name), jobs=1, rules=False)
    span: dict[int, list[float]] = {}
    for r in a.ranks:
        for s in r.steps:
            b = s.start_ms + r.clock_shift_ns / 1e6
            lo, hi = span.get(s.step, [b, b + s.time_ms])
            span[s.step] = [min(lo, b), max(hi, b + s.time_ms)]
    prev = None
    for s in a.critical_path.per_step:
        lo, hi = span[s.step]
        t0 = lo if prev is None or prev >= hi else max(lo, prev)
        assert s.length_ms == pytest.approx(hi - t0, abs=0.1)
        prev = hi
