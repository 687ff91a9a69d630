"""The engine without Dask: the local pool's order and counts, the progress display (a terminal only), the
engine options' usage errors, and the Dask extra missing (one line naming it, exit 2; dask never imported
by a plain analysis)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.engine import EngineSpec, Work, run_jobs
from llmdiag.diagnose.engine.progress import Progress
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, RankOutput, failed_output, run_job
from tests.gen.builder import gpu_rank

RANK_WORK = Work(run_job, failed_output, RankOutput)  # what analyze_path hands the engine

REPO = Path(__file__).resolve().parents[3]


def _folder(d: Path, n: int = 4) -> Path:
    for r in range(n):
        gpu_rank(r, world_size=n, steps=2 + r).write(d / f"rank{r}.json")  # sizes differ: order is not size order
    return d


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


@pytest.mark.parametrize("workers", [1, 2])
def test_pool_returns_outputs_in_job_order_and_counts_every_file(tmp_path, monkeypatch, workers):
    import llmdiag.diagnose.engine.pool as pool
    from rich.console import Console

    monkeypatch.setattr(pool, "MIN_BYTES_PER_WORKER", 1)  # tiny traces: use the worker processes anyway
    d = _folder(tmp_path)
    paths = [str(d / f"rank{r}.json") for r in (2, 0, 3, 1)]
    out = io.StringIO()
    res = run_jobs([RankJob(p) for p in paths], RANK_WORK, EngineSpec(jobs=workers), progress=True,
                   console=Console(file=out, force_terminal=True, width=120))
    assert [o.path for o in res] == paths and [o.rank for o in res] == [2, 0, 3, 1]
    assert all(o.error is None for o in res)
    text = out.getvalue()
    assert "analysing traces" in text and "4/4 files" in text and "/s" in text


def test_progress_counts_files_and_bytes():
    bar = Progress(3, 600, enabled=False)
    with bar:
        bar.describe("starting")
        for n in (100, 200, 300):
            bar.advance(n)
    assert (bar.files_done, bar.bytes_done, bar.total_files, bar.total_bytes) == (3, 600, 3, 600)
    assert bar._bar is None  # disabled: nothing drawn, rich not even consulted


def test_no_progress_off_a_terminal_and_no_dask_import(tmp_path):
    """stderr is a pipe here (as in CI): a clean analysis writes nothing to it; and neither dask nor rich is
    imported by an analysis that does not ask for them (import time is every run's fixed cost)."""
    d = _folder(tmp_path / "run")
    code = ("import sys, runpy; sys.argv = ['llmdiag', 'analyze', %r, '--no-report', '--json', %r]\n"
            "try:\n    from llmdiag.diagnose.cli.main import main\n    main()  # not entry(): it leaves by os._exit\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('LOADED', sorted(m for m in ('dask', 'distributed', 'rich') if m in sys.modules))"
            % (str(d), str(tmp_path / "s.json")))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert "LOADED []" in p.stdout or "LOADED ['rich']" in p.stdout  # rich prints the terminal tables only


@pytest.mark.parametrize("args, env, words", [
    (["--dask-local", "2", "--scheduler", "tcp://127.0.0.1:8786"], {}, "--dask-local and --scheduler"),
    (["--scheduler-file", "x.json", "--scheduler", "tcp://127.0.0.1:8786"], {}, "--scheduler and --scheduler-file"),
    (["--dask-local", "2", "-j", "2"], {}, "--jobs sizes the local process pool"),
])
def test_two_engines_are_one_usage_line(tmp_path, args, env, words):
    d = _folder(tmp_path / "run", 2)
    p = _cli(str(d), "--no-report", "-q", *args, env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("llmdiag: ") and words in line


def test_scheduler_from_the_environment_yields_to_an_explicit_engine():
    from click.core import ParameterSource

    from llmdiag.diagnose.cli.analyze import engine_spec

    class Ctx:
        def __init__(self, src):
            self.src = src

        def get_parameter_source(self, name):
            return self.src

    env, cmd = Ctx(ParameterSource.ENVIRONMENT), Ctx(ParameterSource.COMMANDLINE)
    assert engine_spec(env, None, "tcp://h:8786", None, None) == EngineSpec(scheduler="tcp://h:8786")
    assert engine_spec(env, 4, "tcp://h:8786", None, None) == EngineSpec(jobs=4)
    assert engine_spec(env, None, "tcp://h:8786", None, 2) == EngineSpec(dask_local=2)
    with pytest.raises(LlmdiagError, match="give one of them"):
        engine_spec(cmd, None, "tcp://h:8786", None, 2)


@pytest.mark.parametrize("option", [["--dask-local", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]])
def test_dask_options_without_the_extra_name_it(tmp_path, monkeypatch, option):
    """dask/distributed missing (simulated: an import of a module set to None in sys.modules fails): one line
    naming the extra to install, exit 2, no traceback."""
    from llmdiag.diagnose.cli.main import main

    monkeypatch.setitem(sys.modules, "distributed", None)
    d = _folder(tmp_path / "run", 2)
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-report", "-q", "--json", str(tmp_path / "s.json"), *option])
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith("llmdiag: the Dask engine needs dask and distributed")
    assert line.endswith("pip install 'llmdiag[cluster]'")
    assert not (tmp_path / "s.json").exists()


def test_timings_cover_the_phases(tmp_path):
    from llmdiag.diagnose.analyze import analyze_path

    t: dict = {}
    a = analyze_path(str(_folder(tmp_path / "run", 2)), jobs=1, timings=t)
    assert sorted(t) == ["map", "reduce", "rules"] and all(v >= 0 for v in t.values())
    assert len(a.ranks) == 2
    assert orjson.dumps(a.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY)
