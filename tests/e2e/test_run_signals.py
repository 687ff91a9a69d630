"""Killed processes (issue 17 cases 4 and 6): a worker killed by a signal costs only its rank; a run whose
launcher is gone is `stale`, never `running` forever; `llmdiag run` leaves no orphan after SIGHUP or after
its own SIGKILL (slow: the real torchrun).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.gen.builder import gpu_rank

REPO = Path(__file__).resolve().parents[2]


def _folder(d: Path, n=3) -> Path:
    for r in range(n):
        gpu_rank(r, world_size=n).write(d / f"rank{r}.json")
    return d


def _analyze_with_a_killed_worker(d: Path, out: Path, victim: str, sig: int) -> subprocess.CompletedProcess:
    code = f"""
import os, sys
import llmdiag.diagnose.analyze as an
real = an.run_job
def job(j):
    if j.path.endswith({victim!r}):
        os.kill(os.getpid(), {int(sig)})  # what the OOM killer does to the worker parsing this rank
    return real(j)
an.run_job = job
import llmdiag.diagnose.engine.pool as pool
pool.MIN_BYTES_PER_WORKER = 1  # small test traces: use worker processes anyway
sys.argv = ["llmdiag", "analyze", {str(d)!r}, "--no-report", "-q", "--json", {str(out)!r}, "-j", "2"]
from llmdiag.diagnose.cli.main import main
main()
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_worker_killed_costs_only_its_rank(tmp_path, sig):
    d = _folder(tmp_path / "run")
    alone = tmp_path / "alone"
    for r in (0, 2):
        (alone / f"rank{r}.json").parent.mkdir(exist_ok=True)
        (alone / f"rank{r}.json").write_bytes((d / f"rank{r}.json").read_bytes())
    p = _analyze_with_a_killed_worker(d, tmp_path / "s.json", "rank1.json", sig)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "BrokenProcessPool" not in p.stderr
    assert _wait_for(lambda: not _procs_with(str(d)), 10), "a worker outlived analyze"
    (line,) = [x for x in p.stderr.splitlines() if x.strip()]
    assert line.startswith(f"llmdiag: {d / 'rank1.json'}: the worker analysing this trace died")
    assert signal.Signals(sig).name in line
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert sorted(r["rank"] for r in s["ranks"]) == [0, 2] and s["ranks_missing"] == [1]
    ref = _analyze_with_a_killed_worker(d, tmp_path / "ref.json", "no-such-file", sig)
    assert ref.returncode == 0, ref.stderr
    good = {r["rank"]: {k: v for k, v in r.items() if k != "warnings"}
            for r in orjson.loads((tmp_path / "ref.json").read_bytes())["ranks"]}
    assert all({k: v for k, v in r.items() if k != "warnings"} == good[r["rank"]] for r in s["ranks"])


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_manifest_left_running_by_a_dead_launcher_is_stale(tmp_path):
    d = _folder(tmp_path / "run", 2)
    (d / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "status": "running", "world_size": 2,
        "launch": {"launcher": "torchrun", "pid": _dead_pid(), "host": socket.gethostname()}}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_ACTIONS": ""}
    p = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", str(d), "--no-report", "--json",
                        str(tmp_path / "s.json")], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert s["manifest"]["status"] == "stale" and "never finalised" in s["manifest"]["failure"]["reason"]
    assert any(i["message"].startswith("stale run:") for i in s["issues"])
    c = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "check", str(d), "--min-overlap", "0"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert c.returncode == 1 and "marked stale" in c.stdout, c.stdout


# ---- the real launcher (slow) ----------------------------------------------------------------------------------

def _procs_with(needle: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def _wait_for(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.25)
    return pred()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_launcher_signal_leaves_no_orphan(tmp_path, sig):
    """A rank hangs (--inject-fault rank:1:hang); the launcher gets SIGHUP (ssh drop) or SIGKILL: torchrun and
    every rank are gone soon after, well before --timeout, and the manifest is final (SIGHUP) or analyze
    calls it stale (SIGKILL)."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-m", "llmdiag.diagnose.cli.main", "run", "--workload", "dp2", "--out", str(out),
                          "--steps", "3", "--profile-steps", "0,1,1", "--timeout", "300",
                          "--inject-fault", "rank:1:hang"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert _wait_for(lambda: len(list((out / "traces").glob("rank*.pt.trace.json.gz"))) >= 2, 240), \
            "ranks never wrote their traces"
        time.sleep(2)  # rank 1 now hangs in its unprofiled step
        os.kill(p.pid, sig)
        assert _wait_for(lambda: not _procs_with(str(out)), 60), f"orphans: {_procs_with(str(out))}"
        p.wait(timeout=30)
    finally:
        for pid in _procs_with(str(out)):
            os.kill(pid, signal.SIGKILL)
    m = json.loads((out / "manifest.json").read_text())
    if sig == signal.SIGHUP:
        assert m["status"] == "failed" and "SIGHUP" in m["failure"]["reason"]
    else:
        a = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", str(out), "--no-report", "--json",
                            str(tmp_path / "s.json")], capture_output=True, text=True, env=env, timeout=300)
        assert "Traceback" not in a.stderr and (tmp_path / "s.json").exists(), a.stderr
        assert orjson.loads((tmp_path / "s.json").read_bytes())["manifest"]["status"] == "stale"


def test_partial_files_of_stopped_ranks_are_removed(tmp_path):
    from llmdiag.workloads.launch import _remove_partial_files

    for sub in ("traces", "results"):
        (tmp_path / sub).mkdir()
    keep = [tmp_path / "traces" / "rank1.pt.trace.json.gz", tmp_path / "results" / "rank1.json",
            tmp_path / "traces" / "rank9.pt.trace.json.gz.77.json.tmp"]  # rank 9: another node's, maybe still writing
    gone = [tmp_path / "traces" / "rank1.pt.trace.json.gz.4242.json.tmp",
            tmp_path / "traces" / "rank0.pt.trace.json.gz.4241.gz.tmp", tmp_path / "results" / ".rank1.json.ab12.tmp",
            tmp_path / "traces" / ".rank0.pt.trace.json.gz.k3j2x9.json.tmp"]  # profiling.export_trace's mkstemp names
    for p in keep + gone:
        p.write_bytes(b"x" * 100)
    assert _remove_partial_files(str(tmp_path), range(0, 2)) == 4
    assert all(p.exists() for p in keep) and not any(p.exists() for p in gone)


def test_trace_export_uses_unpredictable_temp_files(tmp_path):
    """The export writes through mkstemp names in the trace folder: a link planted at the old predictable
    `<path>.<pid>.json.tmp` is never followed, and nothing temporary is left beside the finished trace."""
    pytest.importorskip("torch")
    import gzip

    from llmdiag.workloads.profiling import export_trace

    class Prof:
        def export_chrome_trace(self, name):
            with open(name, "w") as f:
                f.write('{"traceEvents": [], "traceName": "%s"}' % name)

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    path = tmp_path / "traces" / "rank0.pt.trace.json.gz"
    path.parent.mkdir()
    for suffix in (".json.tmp", ".gz.tmp"):
        os.symlink(victim, f"{path}.{os.getpid()}{suffix}")
    export_trace(Prof(), str(path))
    assert victim.read_text() == "keep"
    assert gzip.decompress(path.read_bytes()).decode().endswith(f'"traceName": "{path}"}}')
    left = sorted(p.name for p in path.parent.iterdir() if not p.is_symlink())
    assert left == ["rank0.pt.trace.json.gz"]
