"""How the `llmdiag` process ends (cli/main.py `entry`, issue 37): after the command, its exit handlers and a
flush of the standard streams, `os._exit` skips the interpreter's teardown (freeing every module and object one
by one, ~25-40 ms of a small trace's run). These run the real entry in a fresh interpreter and tell the two
endings apart by an object whose `__del__` writes only when the interpreter tears its globals down.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import generate

ROOT = Path(__file__).resolve().parents[3]
_WRAP = """
import atexit, os, sys
class Torn:
    def __del__(self, write=os.write):  # bound now: the module's globals may be gone by then
        write(2, b"TEARDOWN\\n")
torn = Torn()
atexit.register(lambda: print("HANDLER", file=sys.stderr))
mode = sys.argv.pop(1)
if mode == "profiled":
    sys.setprofile(lambda *a: None)
if mode == "thread":
    import threading, time
    def hold(path):  # alive until just after the summary is written: when the command ends
        while not os.path.exists(path):
            time.sleep(0.01)
        time.sleep(0.5)
    threading.Thread(target=hold, args=(sys.argv[sys.argv.index("--json") + 1],)).start()  # not a daemon
sys.argv = ["llmdiag", *sys.argv[1:]]
from llmdiag.diagnose.cli.main import entry
entry()
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    return generate.write_set(str(tmp_path_factory.mktemp("t") / "one"), ranks=1, mb=0.05, steps=2, jobs=1)[0]


def _run(mode: str, *args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache))
    return subprocess.run([sys.executable, "-c", _WRAP, mode, *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cache)


def test_the_command_leaves_without_teardown_once_its_outputs_are_written(trace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = _run("plain", "analyze", trace, "-q", "--json", str(out / "s.json"), "--report", str(out / "r.html"),
                cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "HANDLER" in done.stderr  # exit handlers registered before the command ran, run
    assert "TEARDOWN" not in done.stderr  # no teardown
    assert f"summary: {out / 's.json'}" in done.stdout and f"report:  {out / 'r.html'}" in done.stdout  # flushed
    assert (out / "s.json").read_bytes().endswith(b"}") and (out / "r.html").read_text().rstrip().endswith("</html>")


def test_an_error_exits_with_its_code_the_same_way(tmp_path):
    done = _run("plain", "analyze", str(tmp_path / "missing"), "-q", "--no-report", cache=tmp_path)
    assert done.returncode == 2
    assert "no such file" in done.stderr and "HANDLER" in done.stderr and "TEARDOWN" not in done.stderr


@pytest.mark.parametrize("mode", ["profiled", "thread"])
def test_python_exits_as_usual_under_a_profiler_or_beside_a_live_thread(trace, tmp_path, mode):
    """cProfile and coverage write at teardown; Python waits for a thread that is not a daemon. `-j 1`: with a
    forked child (engine/fork.py, on a machine with an idle core) the heap is left in the collector's permanent
    generation, and Python's own exit was seen not to free the marker either."""
    done = _run(mode, "analyze", trace, "-q", "-j", "1", "--json", str(tmp_path / "s.json"), "--no-report",
                cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "HANDLER" in done.stderr and "TEARDOWN" in done.stderr


@pytest.mark.parametrize("args", [["run", "--help"], ["--help"]])
def test_the_launcher_and_no_command_keep_pythons_exit(tmp_path, args):
    """`run` (torch, signals, its workers' process group) and a process that ran no command exit as Python does."""
    done = _run("plain", *args, cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "HANDLER" in done.stderr and "TEARDOWN" in done.stderr
