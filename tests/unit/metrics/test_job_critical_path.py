"""The job's critical path through collectives (metrics/job/critical_path.py) on small generated two-rank traces,
against paths worked out by hand from the times each test places (µs), not from llmdiag's code.

A collective ends on every member when its last member arrives: walking back from the step's end, the path
leaves a rank at a collective for the member that arrived last and continues on that member's own work.
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder


GEMM = "void gemm_kernel<float>()"


def _ranks(n: int, steps=((1, 0, 40_000),), pg_config: list | None = None) -> list[TraceBuilder]:
    """The n ranks of one job, each with the ProfilerSteps (number, start µs, end µs) given."""
    out = []
    for r in range(n):
        b = TraceBuilder(rank=r, world_size=n, **({"pg_config": pg_config} if pg_config else {}))
        for k, a, e in steps:
            b.step(k, a, e)
        out.append(b)
    return out


def _gemm(b: TraceBuilder, start: int, dur: int, launch_at: int, name: str = GEMM) -> None:
    """A compute kernel on stream 7, launched at `launch_at`."""
    b.kernel(name, start, dur, stream=7, launch_at=launch_at)


def _ar(b: TraceBuilder, start: int, end: int, launch_at: int, pg: str, members: list[int]) -> None:
    """An all-reduce of `members` (group `pg`) on stream 20."""
    b.nccl("allreduce", start, end - start, stream=20, launch_at=launch_at, nelems=1 << 20, group_size=len(members),
           pg_name=pg, pg_desc=f"group{pg}", pg_ranks=members)


def _rank(rank: int, compute_us: int, tail_us: int, world: int = 2) -> TraceBuilder:
    """One step: a compute kernel 100 → 100 + compute_us (launched at 50), an all-reduce launched at 60 that
    begins when the compute ends and completes at 30,200 on both ranks, then a kernel of tail_us (launched at
    70) that begins when the all-reduce ends."""
    b = _ranks(world)[rank]
    _gemm(b, 100, compute_us, 50)
    _ar(b, 100 + compute_us, 30_200, 60, "0", [0, 1])
    _gemm(b, 30_200, tail_us, 70, "void adam_kernel<float>()")
    return b


def _job(tmp_path, *ranks: TraceBuilder):
    for b in ranks:
        b.write(str(tmp_path / f"rank{b.rank}.json"))
    return analyze_path(str(tmp_path), jobs=1, rules=False)


def test_rank_waits_on_the_slower_rank(tmp_path):
    """Rank 0 computes 10 ms (100-10,100) and arrives at the all-reduce at 10,100; rank 1 computes 30 ms and
    arrives at 30,100; the all-reduce ends at 30,200 on both. Rank 0's tail (5 ms, to 35,200) ends the step
    after rank 1's (3 ms, to 33,200), so the path starts on rank 0: its tail 30,200-35,200 (compute 5,000), the
    all-reduce after the last arrival 30,100-30,200 (communication 100), then rank 1 from its arrival back to
    its window's start at 100: its compute 100-30,100 (30,000). Length 35,100: compute 35,000, communication
    100. While the path ran on rank 1's compute, rank 0 waited on rank 1 from its arrival at 10,100 to rank 1's
    at 30,100: 20,000 = 20 ms of the 35.1 ms (57.0 %)."""
    a = _job(tmp_path, _rank(0, 10_000, 5_000), _rank(1, 30_000, 3_000))
    cp = a.critical_path
    assert cp is not None
    assert cp.steps == 1 and cp.hops == 1
    assert cp.length_ms == pytest.approx(35.1)
    assert cp.gpu_compute_bound == pytest.approx(100 * 35_000 / 35_100, abs=0.05)
    assert cp.gpu_communication_bound == pytest.approx(100 * 100 / 35_100, abs=0.05)
    assert cp.cpu_bound == 0 and cp.gpu_kernel_launch_overhead == 0 and cp.gpu_kernel_kernel_overhead == 0
    assert cp.waiting_on_rank == pytest.approx(100 * 20_000 / 35_100, abs=0.05)
    assert cp.waiting_on == {"1": pytest.approx(20.0)}
    assert cp.held_by == {"1": pytest.approx(30.0), "0": pytest.approx(5.1)}
    # the rank's own path (rank 0) holds its whole wait as communication: the job's path says on whom
    assert a.rank(0).critical_path.gpu_communication_bound > 50


def test_equal_ranks_wait_on_no_one(tmp_path):
    """The twin: both ranks compute 30 ms and arrive at 30,100 together; the path is rank 0's tail (5,000), the
    all-reduce 30,100-30,200 (100, no one later) and rank 0's own compute (30,000): no wait on any rank."""
    a = _job(tmp_path, _rank(0, 30_000, 5_000), _rank(1, 30_000, 3_000))
    cp = a.critical_path
    assert cp is not None
    assert cp.length_ms == pytest.approx(35.1)
    assert cp.gpu_compute_bound == pytest.approx(100 * 35_000 / 35_100, abs=0.05)
    assert cp.waiting_on_rank == 0 and cp.waiting_on == {} and cp.hops == 0


def test_summary_round_trip(tmp_path):
    """The section is written to the summary and read back as it was."""
    from llmdiag.diagnose.model.analysis import Analysis

    a = _job(tmp_path, _rank(0, 10_000, 5_000), _rank(1, 30_000, 3_000))
    d = a.to_dict()
    assert d["critical_path"]["waiting_on"] == {"1": pytest.approx(20.0)}
    assert Analysis.from_dict(d).critical_path == a.critical_path


def _imposed_waits(folder) -> dict[int, float]:
    """Per rank, µs its peers waited for it at collectives where it arrived last, read with plain gzip/json: the
    NCCL kernels of each rank (one host, one clock), each of the rank with the fewest matched to every other
    rank's kernel ending nearest it (within 0.5 ms: one collective ends together everywhere); the last to begin
    is the one the others waited for, by the difference of the starts."""
    import gzip
    import json

    kernels = {}
    for f in sorted(folder.glob("*.json.gz")):
        t = json.load(gzip.open(f))
        kernels[t["distributedInfo"]["rank"]] = [(e["ts"], e["ts"] + e["dur"]) for e in t["traceEvents"]
                                                 if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    waits = dict.fromkeys(kernels, 0.0)
    ref = min(kernels, key=lambda r: len(kernels[r]))
    for _, end in kernels[ref]:
        near = {r: min(ks, key=lambda k: abs(k[1] - end)) for r, ks in kernels.items()}
        if all(abs(k[1] - end) <= 500 for k in near.values()):
            last = max(near, key=lambda r: near[r][0])
            waits[last] += sum(near[last][0] - k[0] for k in near.values())
    return waits


TORCHREC = ("torchrec/sst_long_a2a_optimizer_3", "torchrec/sst_long_a2a_optimizer_5",
            "torchrec/sst_sleep_pl_dense_after_backward_2")


@pytest.mark.real(*TORCHREC)
@pytest.mark.parametrize("name", TORCHREC)
def test_real_torchrec_path_runs_on_the_rank_its_peers_wait_for(name):
    """TorchRec's 4-rank DLRM captures (fixtures README): one rank arrives last at most collectives. The rank
    whose peers waited longest for it (plain JSON, above) must be the rank the job's path runs on most, for at
    least half of its length: a straggler's step ends last, and the job's step with it. (In the
    sst_long_a2a_optimizer sets the peers' own paths run on their hosts, 80-86 % cpu-bound with no recorded wait
    on their devices, so the path does not cross ranks there: it stays on the straggler.)"""
    from tests.conftest import REAL
    from pathlib import Path

    folder = Path(REAL) / name
    waits = _imposed_waits(folder)
    expected = max(waits, key=lambda r: waits[r])
    assert waits[expected] > 2 * sorted(waits.values())[-2]  # one clear straggler, or the test says nothing
    cp = analyze_path(str(folder), jobs=1, rules=False).critical_path
    assert cp is not None
    top = max(cp.held_by, key=lambda r: cp.held_by[r])
    assert top == str(expected)
    assert cp.held_by[top] >= 0.5 * cp.length_ms
    assert sum(cp.held_by.values()) == pytest.approx(cp.length_ms, rel=0.01)


def test_terminal_and_report_print_it(tmp_path):
    """The terminal and the report say where the path runs and on whom it waited; the report's numbers carry
    their summary paths and equal the summary's values (tests/unit/reports/test_report.check_numbers)."""
    import re

    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.render import render_html
    from tests.unit.reports.test_report import check_numbers

    a = _job(tmp_path, _rank(0, 10_000, 5_000), _rank(1, 30_000, 3_000))
    text = " ".join(render(a, width=200).split())
    assert "Job critical path (1 step): 35.10 ms per step" in text
    assert "runs on rank 1 for 30.00 ms, rank 0 for 5.10 ms" in text and "rank 1 20.00 ms" in text
    html = render_html(a)
    for key in ("critical_path.length_ms", "critical_path.held_by.1", "critical_path.waiting_on.1"):
        assert f'data-k="{key}"' in html
    check_numbers(a, html)
    para = re.sub(r"<[^>]+>", "", html.split('id="job-critical-path"')[1].split("</p>")[0])
    assert "waited on per step: rank 1 20.00 ms" in para


def test_no_job_path_for_one_rank(tmp_path):
    """One rank: nothing to cross, no section (the rank's own path says it all)."""
    a = _job(tmp_path, _rank(0, 10_000, 5_000))
    assert a.critical_path is None


def _three_ranks() -> list[TraceBuilder]:
    """Rank 0 computes 2 ms (100-2,100), then all-reduces with rank 1 (group 2: 2,100-28,300), then 5 ms (to
    33,300). Rank 1 computes 10 ms (100-10,100), all-reduces with rank 2 (group 1: 10,100-20,200), computes 8 ms
    (20,200-28,200), joins rank 0's all-reduce (28,200-28,300), then 1 ms. Rank 2 computes 20 ms (100-20,100),
    joins group 1 (20,100-20,200), then 1 ms."""
    cfg = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 3, "ranks": [0, 1, 2]},
           {"pg_name": "1", "pg_desc": "group1", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [1, 2]},
           {"pg_name": "2", "pg_desc": "group2", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}]
    out = _ranks(3, pg_config=cfg)
    b0, b1, b2 = out
    _gemm(b0, 100, 2_000, 50)
    _ar(b0, 2_100, 28_300, 60, "2", [0, 1])
    _gemm(b0, 28_300, 5_000, 70)
    _gemm(b1, 100, 10_000, 50)
    _ar(b1, 10_100, 20_200, 60, "1", [1, 2])
    _gemm(b1, 20_200, 8_000, 65)
    _ar(b1, 28_200, 28_300, 62, "2", [0, 1])
    _gemm(b1, 28_300, 1_000, 70)
    _gemm(b2, 100, 20_000, 50)
    _ar(b2, 20_100, 20_200, 60, "1", [1, 2])
    _gemm(b2, 20_200, 1_000, 70)
    return out


def test_path_crosses_two_collectives_and_waits_do_not_overlap(tmp_path):
    """Rank 0's step ends last (33,300). Back from it: its 5 ms (compute 5,000); its all-reduce with rank 1 after
    rank 1 arrived at 28,200 (communication 100); rank 1's 8 ms back to its all-reduce with rank 2, which ended
    at 20,200 (compute 8,000); that all-reduce after rank 2 arrived at 20,100 (communication 100); rank 2's 20 ms
    back to the window's start at 100 (compute 20,000). Length 33,200: compute 33,000, communication 200.
    Rank 0 waited from 2,100 to 28,200, but the path runs on rank 1's own work only from 20,200: rank 0 waited on
    rank 1 8,000 there; rank 1 waited on rank 2 from 10,100 to 20,100 (10,000), while the path ran on rank 2.
    Waiting 18,000 of 33,200 (54.2 %), never counted twice (rank 0's wait before 20,200 is rank 1's on rank 2)."""
    a = _job(tmp_path, *_three_ranks())
    cp = a.critical_path
    assert cp is not None
    assert cp.hops == 2 and cp.length_ms == pytest.approx(33.2)
    assert cp.gpu_compute_bound == pytest.approx(100 * 33_000 / 33_200, abs=0.05)
    assert cp.gpu_communication_bound == pytest.approx(100 * 200 / 33_200, abs=0.05)
    assert cp.waiting_on == {"2": pytest.approx(10.0), "1": pytest.approx(8.0)}
    assert cp.waiting_on_rank == pytest.approx(100 * 18_000 / 33_200, abs=0.05)
    assert cp.held_by == {"2": pytest.approx(20.0), "1": pytest.approx(8.1), "0": pytest.approx(5.1)}


def _offset_steps() -> list[TraceBuilder]:
    """Two steps. Step 1: both ranks compute 5 ms (100-5,100) and all-reduce together (5,100-5,200); rank 0 then
    runs 10 ms (to 15,200), rank 1 1 ms (to 6,200). Step 2 begins on rank 1 at 6,300 with 20 ms of compute
    (arriving at 26,300) and on rank 0 at 15,300 with 2 ms (arriving at 17,300); the all-reduce ends at 26,400;
    tails: rank 0 3 ms (to 29,400), rank 1 1 ms."""
    b0, b1 = _ranks(2, ())
    b0.step(1, 0, 15_250)
    b0.step(2, 15_250, 40_000)
    b1.step(1, 0, 6_250)
    b1.step(2, 6_250, 40_000)
    for b in (b0, b1):
        _gemm(b, 100, 5_000, 50)
        _ar(b, 5_100, 5_200, 60, "0", [0, 1])
    _gemm(b0, 5_200, 10_000, 70)
    _gemm(b1, 5_200, 1_000, 70)
    _gemm(b0, 15_300, 2_000, 15_260)
    _ar(b0, 17_300, 26_400, 15_270, "0", [0, 1])
    _gemm(b0, 26_400, 3_000, 15_280)
    _gemm(b1, 6_300, 20_000, 6_260)
    _ar(b1, 26_300, 26_400, 6_270, "0", [0, 1])
    _gemm(b1, 26_400, 1_000, 6_280)
    return [b0, b1]


def test_steps_tile_the_job_when_windows_begin_apart(tmp_path):
    """Step 1 (job: 100-15,200): rank 0's 10 ms (compute 10,000), the all-reduce both reached together at 5,100
    (communication 100, no wait), rank 0's 5 ms: 15,100. Step 2 begins for the job when step 1 ended on rank 0,
    15,200 (rank 1 began it at 6,300) and ends at 29,400: rank 0's 3 ms (3,000), the all-reduce after rank 1
    arrived at 26,300 (100), rank 1's compute from 26,300 back to 15,200 only (11,100 of its 20,000): 14,200.
    Rank 0 waited from 17,300 to 26,300 on rank 1 (9,000). Per step: (15,100 + 14,200) / 2 = 14.65 ms; compute
    29,100, communication 200; waiting 9,000 / 29,300; rank 0 holds 18,200, rank 1 11,100."""
    a = _job(tmp_path, *_offset_steps())
    cp = a.critical_path
    assert cp is not None
    assert cp.steps == 2 and cp.hops == 0.5
    assert cp.length_ms == pytest.approx(14.65)
    assert cp.gpu_compute_bound == pytest.approx(100 * 29_100 / 29_300, abs=0.05)
    assert cp.waiting_on == {"1": pytest.approx(4.5)}
    assert cp.waiting_on_rank == pytest.approx(100 * 9_000 / 29_300, abs=0.05)
    assert cp.held_by == {"0": pytest.approx(9.1), "1": pytest.approx(5.55)}


def _planted(rank: int, late: bool) -> TraceBuilder:
    """Four steps of 20 ms. Each: a kernel from 100 of 5 ms (10 ms on rank 3 when `late`), an all-reduce of the
    4 ranks that ends at 10,200 (100 after the last arrival), then 1 ms (2 ms on rank 0 when `late`)."""
    b = _ranks(4, [(k + 1, k * 20_000, (k + 1) * 20_000) for k in range(4)])[rank]
    for k in range(4):
        k0 = k * 20_000
        c = 10_000 if late and rank == 3 else 5_000
        _gemm(b, k0 + 100, c, k0 + 50)
        end = k0 + (10_200 if late else 5_200)
        _ar(b, k0 + 100 + c, end, k0 + 60, "0", [0, 1, 2, 3])
        _gemm(b, end, 2_000 if late and rank == 0 else 1_000, k0 + 70, "void adam_kernel<float>()")
    return b


def test_straggler_finding_cites_the_job_path(tmp_path):
    """Rank 3 arrives last at every all-reduce (4 of 4; chance 1/4 each), 5 ms after the others: the straggler
    finding fires. Per step the job's path runs from rank 0's end: its 2 ms, the all-reduce's last 100 µs, then
    rank 3's 10 ms: 12,100 µs, rank 3 holding 10,000 (83 %). The finding says so; the twin without the late rank
    has no straggler finding to cite it, and its path waits on no rank."""
    from llmdiag.diagnose.rules import findings

    d = tmp_path / "late"
    for r in range(4):
        _planted(r, True).write(str(d / f"rank{r}.json"))
    a = analyze_path(str(d), jobs=1, rules=False)
    assert a.critical_path.held_by["3"] == pytest.approx(10.0)
    assert a.critical_path.waiting_on == {"3": pytest.approx(5.0)}
    f = [x for x in findings(a) if x.id == "stragglers"]
    assert f and "the job's critical path runs on rank 3 for 10.00 ms per step (83 % of it)" in f[0].evidence.text
    d = tmp_path / "even"
    for r in range(4):
        _planted(r, False).write(str(d / f"rank{r}.json"))
    a = analyze_path(str(d), jobs=1, rules=False)
    assert not [x for x in findings(a) if x.id == "stragglers"]
    assert a.critical_path.waiting_on == {} and a.critical_path.waiting_on_rank == 0


def test_a_hand_made_summary_names_only_ranks(tmp_path):
    """A summary from elsewhere may key the maps with any text: only rank numbers are printed, never markup."""
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.diagnose.model.analysis import Analysis
    from llmdiag.reports.render import render_html

    d = _job(tmp_path, _rank(0, 10_000, 5_000), _rank(1, 30_000, 3_000)).to_dict()
    d["critical_path"]["held_by"] = {"<b>x</b>": 9.0, "²": 8.0, "1": 30.0}
    d["critical_path"]["waiting_on"] = {"<script>alert(1)</script>": 1.0}
    a = Analysis.from_dict(d)
    text, html = render(a, width=200), render_html(a)
    assert "<b>x" not in html and "<script>alert(1)" not in html and "²" not in text
    assert "runs on rank 1 for 30.00 ms" in " ".join(text.split())


def _p2p(b: TraceBuilder, kind: str, peer: int, start: int, end: int, launch_at: int, stream: int) -> None:
    args = {"Collective name": kind, ("Dst Rank" if kind == "send" else "Src Rank"): peer, "dtype": "Float",
            "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20, "Group size": 2, "Process Group Name": "0",
            "Process Group Description": "default_pg", "Process Group Ranks": [0, 1]}
    b.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", start, end - start, stream=stream,
             launch_at=launch_at, args=args)


def test_path_crosses_a_send_recv(tmp_path):
    """Rank 0 computes 10 ms (100-10,100) then sends to rank 1 (10,100-10,200). Rank 1 computes 1 ms (100-1,100),
    posts the receive at 1,100, which completes at 10,200 (100 after the send was posted), then computes 5 ms
    (to 15,200). Back from rank 1's end: its 5 ms (compute 5,000), the transfer after the send's post (100),
    then rank 0 from the send's post: its 10 ms (10,000). Length 15,100; rank 1 waited on rank 0 from its post
    at 1,100 to the send's at 10,100 (9,000), the path meanwhile on rank 0's compute."""
    b0, b1 = _ranks(2, [(1, 0, 20_000)])
    _gemm(b0, 100, 10_000, 50)
    _p2p(b0, "send", 1, 10_100, 10_200, 60, 40)
    _gemm(b1, 100, 1_000, 50)
    _p2p(b1, "recv", 0, 1_100, 10_200, 60, 40)
    _gemm(b1, 10_200, 5_000, 70)
    a = _job(tmp_path, b0, b1)
    cp = a.critical_path
    assert cp is not None
    assert cp.hops == 1 and cp.length_ms == pytest.approx(15.1)
    assert cp.gpu_compute_bound == pytest.approx(100 * 15_000 / 15_100, abs=0.05)
    assert cp.gpu_communication_bound == pytest.approx(100 * 100 / 15_100, abs=0.05)
    assert cp.waiting_on == {"0": pytest.approx(9.0)}
    assert cp.held_by == {"0": pytest.approx(10.0), "1": pytest.approx(5.1)}
