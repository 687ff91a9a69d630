"""`llmdiag run` as an attack surface: the folder it is started in, a reused `--out`, a file-size limit, and
its own options. The option cases stop before torch is imported (fast); the three that need the real
torchrun are `slow` (a 1-rank CPU run of 3 steps each, ~1 min on 2 cores)."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys

import pytest

from tests.adversarial.conftest import attack, check
from llmdiag.workloads.tracecheck import fresh_file, incomplete_trace

RUN = ["--device", "cpu", "--profile-steps", "0,1,1", "--steps", "3", "--timeout", "300"]


def test_no_options_is_a_usage_line(tmp_path):
    r = attack("run", cwd=tmp_path)
    check(r, 2, one_line=False)
    assert "Missing option '--workload'" in r.stderr


@pytest.mark.parametrize("spec, words", [
    ("rank:99:2", "rank 99 is outside the world of 2 ranks"),
    ("rank:1_0:2", "bad --inject-slow spec 'rank:1_0:2'"),  # int('1_0') is 10
    ("rank:+1:2", "bad --inject-slow spec"),
    ("rank:1:nan", "bad --inject-slow spec"),
    ("rank:1:1_5", "bad --inject-slow spec"),
    ("rank:1:1e1", "bad --inject-slow spec"),
])
def test_inject_slow_outside_the_world_or_not_an_integer(tmp_path, spec, words):
    r = attack("run", "-w", "dp2", "--out", tmp_path / "out", "--inject-slow", spec, *RUN, cwd=tmp_path)
    check(r, 2, words)
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_inject_fault_outside_the_world(tmp_path):
    r = attack("run", "-w", "dp2", "--out", tmp_path / "out", "--inject-fault", "rank:2:raise", *RUN, cwd=tmp_path)
    check(r, 2, "rank 2 is outside the world of 2 ranks")


def _plant_package(folder) -> str:
    """./llmdiag/workloads/ whose import writes a marker: what `python -m llmdiag.workloads.train` ran from the cwd."""
    marker = os.path.join(folder, "PWNED")
    top = os.path.join(folder, "llmdiag")
    pkg = os.path.join(top, "workloads")
    os.makedirs(pkg)
    for d, names in ((top, ("__init__.py",)), (pkg, ("__init__.py", "train.py", "errors.py"))):
        for name in names:
            with open(os.path.join(d, name), "w") as f:
                f.write(f"open({marker!r}, 'a').write('{name}\\n')\n")
    return marker


def test_the_ranks_import_the_installed_package_not_the_cwd(tmp_path):
    """The launcher's environment, given to `python -m` in a folder holding a planted ./llmdiag/workloads/."""
    from llmdiag.workloads.launch import Launch

    marker = _plant_package(tmp_path)
    env = Launch.env(type("L", (), {"opts": type("O", (), {"device": "cuda"})(), "fault": None, "nproc": 1})())
    p = subprocess.run([sys.executable, "-m", "llmdiag.workloads.errors"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(marker)
    if sys.version_info >= (3, 11):
        assert env["PYTHONSAFEPATH"] == "1" and "" not in env["PYTHONPATH"].split(os.pathsep)


def _trace(tmp_path, data: bytes, cut: int | None = None) -> str:
    g = gzip.compress(data)
    p = tmp_path / "t.json.gz"
    p.write_bytes(g if cut is None else g[:cut])
    return str(p)


def test_incomplete_trace_by_an_independent_cut(tmp_path):
    rnd = random.Random(1)
    events = [{"name": f"k{rnd.randrange(10**9)}", "ph": "X", "ts": i, "dur": 1} for i in range(20000)]
    whole = json.dumps({"traceEvents": events}).encode()
    assert incomplete_trace(_trace(tmp_path, whole)) is None
    size = len(gzip.compress(whole))
    assert "cut off" in incomplete_trace(_trace(tmp_path, whole, size // 2))
    assert "cut off" in incomplete_trace(_trace(tmp_path, whole, size - 1))
    assert incomplete_trace(_trace(tmp_path, whole[:-100])) == "the JSON inside is cut off"
    assert incomplete_trace(_trace(tmp_path, b"", None)) == "20 bytes"  # what RLIMIT_FSIZE left: a gzip header
    (tmp_path / "t.json.gz").write_bytes(b"\x1f\x8b" + bytes(100))
    assert incomplete_trace(str(tmp_path / "t.json.gz")).startswith("corrupt gzip")


def test_fresh_file_replaces_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "rank0.log").symlink_to(victim)
    os.close(fresh_file(str(tmp_path / "rank0.log")))
    assert victim.read_text() == "keep" and not (tmp_path / "rank0.log").is_symlink()


@pytest.mark.slow
def test_a_planted_cwd_and_log_links_change_nothing(tmp_path):
    marker = _plant_package(tmp_path)
    out = tmp_path / "out"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.makedirs(out / "logs")
    for name in ("rank0.log", "torchrun.log"):
        (out / "logs" / name).symlink_to(victim)
    r = attack("run", "-w", "single", "--out", out, *RUN, cwd=tmp_path, timeout=600)
    check(r, 0, one_line=False)
    assert not os.path.exists(marker) and victim.read_text() == "keep"
    assert not (out / "logs" / "rank0.log").is_symlink() and (out / "logs" / "rank0.log").stat().st_size > 0


@pytest.mark.slow
def test_a_file_size_limit_is_a_failed_run(tmp_path):
    """Under RLIMIT_FSIZE the trace is cut (a 40-byte gzip before) while the rank's record says ok: exit 1."""
    out = tmp_path / "out"
    r = attack("run", "-w", "single", "--out", out, *RUN, cwd=tmp_path, timeout=600, fsize=200_000)
    check(r, 1, one_line=False)
    assert "its trace is incomplete" in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and "its trace is incomplete" in m["rank_status"]["0"]["error"]
