"""A small input's jobs in a forked child while this process runs `meanwhile` (engine/fork.py): the same outputs
in job order as run here, `meanwhile` run once in this process, a dead child costing only its own jobs (named
as failed), and no fork where the caller did not opt in, allowed one worker, or runs other threads."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from llmdiag.diagnose.engine import Work, fork
from llmdiag.diagnose.metrics.rank.per_rank import RankOutput, failed_output, run_job
from tests.gen.builder import write_gpu_ranks

RANK_WORK = Work(run_job, failed_output, RankOutput)
REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(sys.platform != "linux" or not hasattr(os, "fork"), reason="forks on Linux only")


def same(a, b) -> bool:
    """Equal values all the way down (numpy arrays element by element, dataclasses field by field)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)  # NaN equals NaN here


def _pid_job(job) -> tuple[str, int]:
    return (job.path, os.getpid())


def _die_on_b(job):
    if job.path.endswith("b"):
        os.kill(os.getpid(), signal.SIGKILL)
    return (job.path, os.getpid())


PID_WORK = Work(_pid_job, lambda job, line: (job.path, line), tuple)


def _fresh(tmp_path, body: str) -> dict:
    """`body` run in a fresh interpreter (no thread another test left running, which rightly turns the fork
    off), with `jobs` over files a (10 bytes), b (300) and c (20) and `here` its pid; it sets `out`."""
    for name, size in (("a", 10), ("b", 300), ("c", 20)):
        (tmp_path / name).write_bytes(b"x" * size)
    code = textwrap.dedent(f"""
        import json, os, sys
        from llmdiag.diagnose.engine import EngineSpec, Work, run_jobs
        from llmdiag.diagnose.io import forked
        forked.idle_core = lambda: True  # as on a quiet machine, whatever the load here
        from llmdiag.diagnose.metrics.rank.per_rank import RankJob
        from tests.unit.engine.test_fork import PID_WORK, _die_on_b
        here = os.getpid()
        jobs = [RankJob(os.path.join({str(tmp_path)!r}, n)) for n in "abc"]
        """) + textwrap.dedent(body) + "\nprint('OUT', json.dumps(out))\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.split("OUT ", 1)[1])


@pytest.mark.parametrize("n", [1, 3])
def test_forked_outputs_equal_the_in_process_ones(tmp_path, n):
    paths = write_gpu_ranks(tmp_path, n)
    out = _fresh(tmp_path, f"""
        from llmdiag.diagnose.engine import fork
        from tests.unit.engine.test_fork import RANK_WORK, same
        jobs = [RankJob(p) for p in {paths!r}]
        here_ = run_jobs(jobs, RANK_WORK, EngineSpec(jobs=2))
        ran = []
        forked = run_jobs(jobs, RANK_WORK, EngineSpec(jobs=2, meanwhile=lambda: ran.append(os.getpid())))
        out = [fork.usable(lambda: None, 2), ran == [here], [o.path for o in forked],
               [[same(a, b) and a.metrics is not None for b in here_] for a in forked]]
        """)
    assert out == [True, True, paths, [[i == j for j in range(n)] for i in range(n)]]  # each its own and no other


def test_a_lone_job_goes_to_the_child_and_the_largest_first(tmp_path):
    assert fork.split([1, 2, 0], [10, 300, 20]) == ([1], [2, 0])  # the child: 300; here: 20 and 10 (and meanwhile)
    out = _fresh(tmp_path, """
        ran = []
        one = run_jobs(jobs[:1], PID_WORK, EngineSpec(jobs=2, meanwhile=lambda: ran.append(os.getpid())))
        three = run_jobs(jobs, PID_WORK, EngineSpec(jobs=2, meanwhile=lambda: None))
        out = [one[0][1] != here, ran == [here], [p for p, _ in three] == [j.path for j in jobs],
               [pid == here for _, pid in three]]
        """)
    assert out == [True, True, True, [True, False, True]]


def test_no_fork_without_meanwhile_with_one_worker_or_another_thread(tmp_path):
    out = _fresh(tmp_path, """
        import threading
        ran = []
        out = [run_jobs(jobs, PID_WORK, EngineSpec(jobs=2))[1][1] == here,
               run_jobs(jobs, PID_WORK, EngineSpec(jobs=1, meanwhile=lambda: ran.append(1)))[1][1] == here]
        out.append(ran == [])  # not run: its imports come when first needed, as without it
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        out.append(run_jobs(jobs, PID_WORK, EngineSpec(jobs=2, meanwhile=lambda: None))[1][1] == here)
        stop.set()
        t.join()
        """)
    assert out == [True, True, True, True]


def test_a_killed_child_costs_only_its_jobs(tmp_path):
    """The child runs b (the largest) and is killed: b is named as failed with the signal; a and c ran here;
    a `meanwhile` that raises changes nothing."""

    out = _fresh(tmp_path, """
        def boom():
            raise ImportError("no such module")

        res = run_jobs(jobs, Work(_die_on_b, lambda job, line: (job.path, line), tuple),
                       EngineSpec(jobs=2, meanwhile=boom))
        out = [[p == j.path for (p, _), j in zip(res, jobs)], res[0][1] == here, res[2][1] == here, res[1][1]]
        """)
    assert out[:3] == [[True, True, True], True, True]
    b = str(tmp_path / "b")
    assert out[3].startswith(f"llmdiag: {b}: the worker analysing this trace died (killed by signal 9 (SIGKILL; "
                             "the out-of-memory killer?)); left out")


def test_nothing_left_meanwhile_runs_a_lone_job_here_and_shares_two(tmp_path):
    """After the parse ahead (io/ahead.py) this process has nothing to do meanwhile: a lone job runs here (a fork
    would only cost), two or more are still shared, with no head start for this process."""
    assert fork.split([0, 1, 2], [100, 90, 20], head=False) == ([0], [1, 2])
    assert fork.split([0, 1, 2], [100, 90, 20]) == ([0, 2], [1])  # here a job's share behind: the 20 goes there
    out = _fresh(tmp_path, """
        from llmdiag.diagnose.engine.fork import NOTHING
        one = run_jobs(jobs[:1], PID_WORK, EngineSpec(jobs=2, meanwhile=NOTHING))
        three = run_jobs(jobs, PID_WORK, EngineSpec(jobs=2, meanwhile=NOTHING))
        out = [one[0][1] == here, [pid == here for _, pid in three]]
        """)
    assert out == [True, [True, False, True]]
