"""The Dask engine on real clusters in CI (worker processes of one thread, 2 cores): the summary is the local
pool's, a worker killed mid-trace costs at most that trace (retried once, then named), a scheduler that is
unreachable or goes away is one line within a bounded wait, and a trace the workers cannot open is named
with the reason (a filesystem they do not share)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from benchmarks.generate import write_set
from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.engine import EngineSpec, Work, run_jobs
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, RankOutput, failed_output, run_job
from tests.gen.builder import gpu_rank

RANK_WORK = Work(run_job, failed_output, RankOutput)  # what analyze_path hands the engine

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}


def _summary(a) -> dict:
    """The summary as `check` reads it, less what records how it was made (command, time)."""
    d = orjson.loads(orjson.dumps(a.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
    d.pop("provenance", None)
    return d


def test_dask_local_summary_is_the_pools(tmp_path):
    """128 generated ranks with the rules: the same findings, ranks, skew and issues, number for number."""
    d = tmp_path / "s128"
    write_set(str(d), 128, 0.1, jobs=2)
    pool = analyze_path(str(d), jobs=2)
    t: dict = {}
    dask = analyze_path(str(d), engine=EngineSpec(dask_local=2), timings=t)
    assert len(pool.ranks) == 128 and pool.findings
    assert _summary(dask) == _summary(pool)
    assert t["map"] > 0


def _kill_script(d: Path, out: Path, marker: Path) -> str:
    """`llmdiag analyze --dask-local 2` where the worker running rank1 dies every time (SIGKILL, as the OOM killer
    does) and the one running rank2 dies the first time only."""
    return f"""
import os, sys
import llmdiag.diagnose.analyze as an
real = an.run_job
def job(j):
    name = os.path.basename(j.path)
    if name == "rank1.json" or (name == "rank2.json" and not os.path.exists({str(marker)!r})):
        if name == "rank2.json":
            open({str(marker)!r}, "w").close()
        os.kill(os.getpid(), 9)
    return real(j)
an.run_job = job
sys.argv = ["llmdiag", "analyze", {str(d)!r}, "--no-report", "-q", "--json", {str(out)!r}, "--dask-local", "2"]
from llmdiag.diagnose.cli.main import main
main()
"""


def test_worker_killed_mid_trace_is_retried_then_named(tmp_path):
    d = tmp_path / "run"
    for r in range(4):
        gpu_rank(r, world_size=4).write(d / f"rank{r}.json")
    ref = analyze_path(str(d), jobs=1, rules=False)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", _kill_script(d, tmp_path / "s.json", tmp_path / "died-once")],
                       capture_output=True, text=True, timeout=180, env=ENV, cwd=REPO)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "KilledWorker" not in p.stderr
    assert (tmp_path / "died-once").exists()  # rank2's first worker did die
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    line = lines[0]
    assert line.startswith(f"llmdiag: {d / 'rank1.json'}: the Dask workers analysing this trace died (2 tries")
    assert line.endswith("left out (the other ranks are analysed)")
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert sorted(r["rank"] for r in s["ranks"]) == [0, 2, 3] and s["ranks_missing"] == [1]
    good = {r.rank: r for r in ref.ranks}
    for r in s["ranks"]:  # the retried rank2 and the others: the numbers of an undisturbed run
        assert r["step_time_ms"] == good[r["rank"]].step_time_ms and r["comm_ms"] == good[r["rank"]].comm_ms
    assert time.monotonic() - t0 < 120


def test_unreachable_scheduler_is_one_line_and_prompt(tmp_path):
    d = tmp_path / "run"
    gpu_rank(0, world_size=1).write(d / "rank0.json")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", str(d), "--no-report", "-q"],
                       capture_output=True, text=True, timeout=60, cwd=REPO,
                       env={**ENV, "DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:9",
                            "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert time.monotonic() - t0 < 30
    assert p.returncode == 2
    (line,) = p.stderr.splitlines()
    assert line.startswith("llmdiag: cannot reach the Dask scheduler at tcp://127.0.0.1:9 (")


# ---- an external scheduler and worker (dask's own CLI), as on a cluster --------------------------------------

def _start_cluster(tmp_path: Path) -> tuple[subprocess.Popen, subprocess.Popen, Path]:
    sf = tmp_path / "scheduler.json"
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(sf),
                              "--no-dashboard", "--port", "0", "--host", "127.0.0.1"], env=ENV, cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sf),
                               "--nworkers", "1", "--nthreads", "1", "--no-dashboard"], env=ENV, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sched, worker, sf


@pytest.fixture
def cluster(tmp_path):
    procs = _start_cluster(tmp_path)
    yield procs
    for p in procs[:2]:
        p.kill()
        p.wait(timeout=30)


def slow_job(job: RankJob):
    """Runs on the worker: a trace that takes a second and leaves `<trace>.done` behind, so the test can kill the
    scheduler once some traces are done and others are running."""
    time.sleep(1.0)
    out = run_job(job)
    Path(job.path + ".done").touch()
    return out


def test_external_scheduler_file_names_unshared_traces_and_shows_progress(tmp_path, cluster):
    from rich.console import Console

    d = tmp_path / "run"
    for r in range(2):
        gpu_rank(r, world_size=3).write(d / f"rank{r}.json")
    jobs = [RankJob(str(d / "rank0.json")), RankJob("/nonexistent/on/the/workers/rank2.json"),
            RankJob(str(d / "rank1.json"))]
    out = io.StringIO()
    res = run_jobs(jobs, RANK_WORK, EngineSpec(scheduler_file=str(cluster[2])), progress=True,
                   console=Console(file=out, force_terminal=True, width=120))
    assert [o.rank for o in res] == [0, None, 1]
    assert res[1].error.startswith("llmdiag: /nonexistent/on/the/workers/rank2.json: a Dask worker on ")
    assert "the traces must be on a filesystem the workers share, at the same path" in res[1].error
    assert "3/3 files" in out.getvalue()


def test_no_result_within_the_bound_is_one_line(tmp_path, cluster, monkeypatch):
    """A worker that never finishes (here: a trace that takes a second, against a bound lowered to 0.3 s) stops
    the analysis with one line saying what was done and what the bound was, instead of waiting forever."""
    import llmdiag.diagnose.engine.dask_engine as de

    monkeypatch.setattr(de, "WAIT_FLOOR_S", 0.3)
    d = tmp_path / "run"
    gpu_rank(0, world_size=1).write(d / "rank0.json")
    t0 = time.monotonic()
    with pytest.raises(LlmdiagError) as e:
        run_jobs([RankJob(str(d / "rank0.json"))], Work(slow_job, failed_output, RankOutput), EngineSpec(scheduler_file=str(cluster[2])))
    assert time.monotonic() - t0 < 30
    assert re.fullmatch(r"llmdiag: no trace finished on the Dask scheduler at tcp://127\.0\.0\.1:\d+ for 0\.3\d* s, "
                        r"after 0 of 1 traces \(.*; the bound is 0\.3 s plus 1 s per MB of the largest trace left\)",
                        e.value.line()), e.value.line()


def test_scheduler_going_away_is_one_line_not_a_hang(tmp_path, cluster):
    sched, _, sf = cluster
    d = tmp_path / "run"
    for r in range(8):
        gpu_rank(r, world_size=8).write(d / f"rank{r}.json")
    jobs = [RankJob(str(d / f"rank{r}.json")) for r in range(8)]
    killed = []

    def kill_after_two():
        end = time.monotonic() + 60
        while len(list(d.glob("*.done"))) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        sched.kill()
        killed.append(time.monotonic())

    threading.Thread(target=kill_after_two, daemon=True).start()
    with pytest.raises(LlmdiagError) as e:
        run_jobs(jobs, Work(slow_job, failed_output, RankOutput), EngineSpec(scheduler_file=str(sf)))
    assert killed and time.monotonic() - killed[0] < 15
    assert re.fullmatch(r"llmdiag: the Dask scheduler at tcp://127\.0\.0\.1:\d+ went away after [0-7] of 8 traces.*",
                        e.value.line()), e.value.line()
