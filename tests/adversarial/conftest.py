"""The adversarial suite's one helper: the real command line in a subprocess, under bounds.

`attack(...)` runs `llmdiag ARGS` as a fresh interpreter with an address-space cap (`resource.setrlimit`
RLIMIT_AS: a runaway allocation fails there instead of taking the machine; pyarrow reserves ~2 GB of address
space it never touches, so the cap is 4 GiB) and a wall-clock limit, then reports what the bounds are about:
exit code, stderr, wall seconds and the peak resident memory of the process and its children (`ru_maxrss`,
written by the child itself at exit). `check(...)` asserts the contract every attack shares: no traceback, the
expected exit code, one `llmdiag:` line naming the problem where one is expected, at most MEM_BYTES resident.

TIME_S is the bound the issue sets (10 s); CI runners shared by other jobs get LLMDIAG_ADV_SLACK (default 3)
times it as the subprocess timeout, so a regression of the kind these attacks cause (minutes, or never) fails
and a busy runner does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# LLMDIAG_ADV_REPO: run the attacks against another checkout (the "before" of docs/robustness.md)
REPO = Path(os.environ.get("LLMDIAG_ADV_REPO") or Path(__file__).resolve().parents[2])
TIME_S = 10.0
MEM_BYTES = 1 << 30
AS_CAP = 4 << 30
SLACK = float(os.environ.get("LLMDIAG_ADV_SLACK", "3"))

_WRAP = """
import os, resource, signal, sys
cap, fsize, rss = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
if fsize:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
sys.argv = ['llmdiag'] + sys.argv[4:]
sys.path = [p for p in sys.path if p not in ('', os.getcwd())]  # as the installed `llmdiag` script: no cwd
try:
    from llmdiag.diagnose.cli.main import main
    main()
finally:
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    with open(rss, 'w') as f:
        f.write(str(peak * 1024))
"""


@dataclass
class Result:
    rc: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    wall_s: float
    peak_bytes: int | None

    @property
    def lines(self) -> list[str]:
        return [x for x in self.stderr.splitlines() if x.strip()]


def attack(*args, cwd, env: dict | None = None, fsize: int = 0, timeout: float | None = None,
           cap: int = AS_CAP, stdin=subprocess.DEVNULL) -> Result:
    """`llmdiag ARGS` in `cwd`, bounded; never raises on a timeout (rc None)."""
    rss = Path(cwd) / ".adv-rss"
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_ACTIONS": "", **(env or {})}
    cmd = [sys.executable, "-c", _WRAP, str(cap), str(fsize), str(rss), *map(str, args)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=full_env, stdin=stdin,
                           timeout=timeout or TIME_S * SLACK)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, _text(e.stdout), _text(e.stderr)
    wall = time.monotonic() - t0
    peak = None
    if rss.exists():
        peak = int(rss.read_text() or 0)
        rss.unlink()
    return Result(rc, out, err, wall, peak)


def _text(b) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def check(r: Result, rc: int, *words: str, one_line: bool = True) -> str | None:
    """The shared contract; returns the `llmdiag:` line (where one is expected)."""
    assert r.rc is not None, f"still running after {r.wall_s:.0f} s: {r.stderr[-1500:]}"
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-3000:]
    assert r.rc == rc, f"exit {r.rc}, expected {rc}: {r.stderr[-2000:]}"
    if r.peak_bytes is not None:
        assert r.peak_bytes <= MEM_BYTES, f"{r.peak_bytes / 2**20:.0f} MiB resident"
    if not one_line:
        return None
    mine = [x for x in r.lines if x.startswith("llmdiag: ")]
    assert mine, r.stderr[-2000:]
    line = mine[0]
    for w in words:
        assert w in line, line
    return line


@pytest.fixture
def run(tmp_path):
    """A good 2-rank GPU run folder, the input most attacks aim their options at."""
    from tests.gen.builder import gpu_rank

    d = tmp_path / "run"
    for r in (0, 1):
        gpu_rank(r, world_size=2).write(d / f"rank{r}.json")
    return d
