"""What a command imports (issue #30 item 6): every `analyze`, `check` and pool worker pays its imports again,
so a module the command does not use is not imported. Each case runs the real command line in a fresh
interpreter and reads its `sys.modules` afterwards; an eager import of an optional extra or of a stage the
input does not need fails here. The time itself is measured by `make bench` (benchmarks/import_cost.py), not
asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gen.builder import gpu_rank
from tests.gen.pipeline import Case, write

REPO = Path(__file__).resolve().parents[3]
# The optional extras (pyproject's [project.optional-dependencies]) and what `analyze` of traces never needs.
EXTRAS = ("pyarrow", "dask", "distributed", "polars", "duckdb", "pandas", "matplotlib", "torch", "hta", "jinja2")
D = "llmdiag.diagnose"
# Stages a one-rank `analyze --no-report -q` has no use for: no pipeline to simulate, no gate, no export, no
# report, no terminal tables (-q), no launcher; nor the stdlib modules of --open and of a worker's death.
UNNEEDED = (f"{D}.simulate", f"{D}.export", f"{D}.gate", f"{D}.cli.gate", f"{D}.cli.run", f"{D}.cli.terminal",
            f"{D}.cli.hta_check", "llmdiag.reports", "llmdiag.workloads", "rich", "webbrowser", "multiprocessing",
            "statistics", "numpy.ma")  # ~2 and ~8 ms: model/stats.py and metrics/rank/sets.py give their answers
# Nor the cross-rank parts one rank does not have (skew, stragglers, the pipeline, a mesh, several runs), the
# types only they build (model/analysis.py LAZY_TYPES), the tables' row types, the packed writer (many ranks), or
# the straggler study's op-table reader (a Kineto input only asks io/op_table_path.py whether it is one).
ONE_RANK_UNNEEDED = tuple(f"{D}.{m}" for m in (
    "io.megatron_ops", "metrics.job.skew", "metrics.job.collective_match", "metrics.job.mesh", "metrics.job.pipeline.bubbles",
    "metrics.job.pipeline.chains", "metrics.job.pipeline.virtual", "metrics.job.track_intervals",
    "metrics.rank.op_scaling", "model.manifest", "model.matching", "model.moe", "model.pipeline", "model.runs",
    "model.skew", "model.whatif", "model.views", "model.pack_write"))


def _modules(tmp_path: Path, *argv: str) -> set[str]:
    """The modules loaded once `llmdiag *argv` has run (it must exit 0) in a fresh interpreter."""
    code = ("import json, runpy, sys\nsys.argv = ['llmdiag', *json.loads(sys.argv[1])]\n"
            "try:\n    from llmdiag.diagnose.cli.main import main\n    main()  # not entry(): it leaves by os._exit\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('MODULES', json.dumps(sorted(sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    return set(json.loads(p.stdout.split("MODULES ", 1)[1]))


def _under(mods: set[str], names) -> list[str]:
    return sorted(m for m in mods for n in names if m == n or m.startswith(n + "."))


@pytest.mark.parametrize("jobs", [["-j", "1"], []])  # -j 1: the rank's own work in this process (no fork), read too
def test_one_rank_analyze_imports_no_extra_and_no_stage_it_does_not_use(tmp_path, jobs):
    gpu_rank(0, world_size=1).write(tmp_path / "run" / "rank0.json")
    mods = _modules(tmp_path, "analyze", str(tmp_path / "run"), "--no-report", "-q", "--json", str(tmp_path / "s.json"),
                    *jobs)
    assert _under(mods, EXTRAS) == []
    assert _under(mods, UNNEEDED) == []
    assert _under(mods, ONE_RANK_UNNEEDED) == []
    # the analysis did run in this process, rules included (a run that imported nothing would pass the above)
    assert {f"{D}.metrics.rank.per_rank", f"{D}.metrics.job.cross_rank", f"{D}.rules", "numpy"} <= mods
    assert json.loads((tmp_path / "s.json").read_text())["ranks"][0]["rank"] == 0


def test_a_pipeline_still_imports_the_simulation(tmp_path):
    """The what-if is imported where there is one to run: a 2-stage pipeline's summary carries it."""
    write(Case(p=2, m=4, steps=2), tmp_path / "pp")
    mods = _modules(tmp_path, "analyze", str(tmp_path / "pp"), "--no-report", "-q", "-j", "1",
                    "--json", str(tmp_path / "s.json"))
    assert {f"{D}.simulate.kineto", f"{D}.simulate.replay"} <= mods
    assert {f"{D}.metrics.job.pipeline.bubbles", f"{D}.model.pipeline", f"{D}.model.whatif"} <= mods  # loaded on use
    assert _under(mods, EXTRAS) == []
    assert json.loads((tmp_path / "s.json").read_text())["whatif"]["source"] == "kineto-pipeline"


def test_the_command_line_imports_a_command_only_when_it_runs(tmp_path):
    """`llmdiag --version` loads no command; `--help` loads each, to list it with its one-line help."""
    assert _under(_modules(tmp_path, "--version"), [f"{D}.cli.analyze", f"{D}.cli.gate", f"{D}.cli.run"]) == []
    p = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "--help"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    listed = [ln.split()[0] for ln in p.stdout.split("Commands:", 1)[1].splitlines() if ln.strip()]
    assert listed == ["analyze", "check", "diff", "run"]
    assert "Gate a run against a baseline or limits (CI)." in p.stdout


@pytest.mark.parametrize("cmd", ["check", "diff"])
def test_each_command_help_keeps_its_examples(cmd):
    p = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", cmd, "--help"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    from llmdiag.diagnose.cli.main import EXAMPLES

    assert p.returncode == 0, p.stderr
    assert "Examples:" in p.stdout and all(x in p.stdout for x in EXAMPLES[cmd])



def _threads_after(tmp_path: Path, env: dict, *argv: str) -> tuple[int, str | None]:
    """(threads alive, OPENBLAS_NUM_THREADS as the process sees it) once `llmdiag *argv` has run with `env`."""
    code = ("import json, os, runpy, sys\nsys.argv = ['llmdiag', *json.loads(sys.argv[1])]\n"
            "try:\n    from llmdiag.diagnose.cli.main import main\n    main()  # not entry(): it leaves by os._exit\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('THREADS', json.dumps([len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS')]))")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    n, var = json.loads(p.stdout.split("THREADS ", 1)[1])
    return n, var


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; OpenBLAS starts no pool on one core")
def test_analyze_starts_no_blas_threads_and_leaves_the_environment_alone(tmp_path):
    """numpy's OpenBLAS started a thread per core at load (~60 ms of CPU per run; engine/blas.py): `analyze`
    loads numpy with one and restores the environment it borrowed; a thread count the user set is theirs."""
    gpu_rank(0, world_size=1).write(tmp_path / "run" / "rank0.json")
    argv = ("analyze", str(tmp_path / "run"), "--no-report", "-q", "--json", str(tmp_path / "s.json"))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    assert _threads_after(tmp_path, env, *argv) == (1, None)
    # -j 1: run here (OpenBLAS stops its pool when a process forks, engine/fork.py, and restarts it on use)
    assert _threads_after(tmp_path, {**env, "OPENBLAS_NUM_THREADS": "2"}, *argv, "-j", "1") == (2, "2")


def test_analyze_leaves_the_heap_to_exit_without_a_collection(tmp_path):
    """The cyclic collector's passes at interpreter exit rescanned the whole heap of a finished `analyze`
    (40-60 ms of CPU a run): the command freezes it in an exit handler. An exit handler registered before the
    command runs (so it runs after the command's) sees the heap frozen; exit code and summary as before."""
    gpu_rank(0, world_size=1).write(tmp_path / "run" / "rank0.json")
    code = ("import atexit, gc, json, runpy, sys\n"
            "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), flush=True))\n"
            "sys.argv = ['llmdiag', *json.loads(sys.argv[1])]\n"
            "runpy.run_module('llmdiag.diagnose.cli.main', run_name='__main__')\n")
    argv = ["analyze", str(tmp_path / "run"), "--no-report", "-q", "--json", str(tmp_path / "s.json")]
    p = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.split("FROZEN ", 1)[1]) > 10_000
    assert json.loads((tmp_path / "s.json").read_text())["ranks"]
