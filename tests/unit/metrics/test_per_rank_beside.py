"""One rank's analysis with its critical path in a forked child (per_rank.py through io/forked.py Beside) and the
trace-only sections shared between the two processes (Shares): the output is the one computed in one process,
whichever side took which section, and when the child dies after taking some, this process computes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.gen.builder import gpu_rank

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(sys.platform != "linux" or not hasattr(os, "fork"), reason="forks on Linux only")


def _fresh(path: str, body: str) -> list:
    code = textwrap.dedent(f"""
        import json, os, signal, time
        from llmdiag.diagnose.io import forked
        forked.idle_core = lambda: True  # as on a quiet machine
        from llmdiag.diagnose.metrics.rank import per_rank
        from tests.unit.engine.test_fork import same
        per_rank.BESIDE_BYTES = 0  # a small trace forks its path too
        here = os.getpid()
        path = {path!r}
        alone = per_rank.run_job(per_rank.RankJob(path))  # helpers 0: no child
        taken = []  # (section, pid) as run
        for name in ("data_movement", "rank_moe", "regather_ms", "stream_idle"):
            real = getattr(per_rank, name)
            def spy(*a, _real=real, _name=name, **k):
                taken.append((_name, os.getpid()))
                with open(path + ".taken", "a") as f:
                    f.write(f"{{_name}} {{os.getpid()}}\\n")
                return _real(*a, **k)
            setattr(per_rank, name, spy)
        """) + textwrap.dedent(body) + "\nprint('OUT', json.dumps(out))\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.split("OUT ", 1)[1])


def _taken(path: str) -> list[tuple[str, int]]:
    rows = Path(path + ".taken").read_text().split("\n")
    return [(r.split()[0], int(r.split()[1])) for r in rows if r]


def test_sections_taken_by_either_side_give_the_one_process_output(tmp_path):
    path = str(tmp_path / "rank0.json")
    gpu_rank(0, world_size=2, steps=6).write(path)
    out = _fresh(path, """
        slow = per_rank.data_movement  # this process is held on the first section: the child takes later ones
        def held(*a, **k):
            if os.getpid() == here:
                time.sleep(1.0)
            return slow(*a, **k)
        per_rank.data_movement = held
        both = per_rank.run_job(per_rank.RankJob(path, helpers=2))
        out = [same(both, alone), here]
        """)
    assert out[0] is True
    pids = {pid for _, pid in _taken(path)}
    assert out[1] in pids and len(pids) == 2  # each side ran some of the spied sections


def test_a_child_that_dies_with_sections_taken_leaves_them_to_this_process(tmp_path):
    path = str(tmp_path / "rank0.json")
    gpu_rank(0, world_size=2, steps=6).write(path)
    out = _fresh(path, """
        slow, regather = per_rank.data_movement, per_rank.regather_ms
        def held(*a, **k):
            if os.getpid() == here:
                time.sleep(1.0)
            return slow(*a, **k)
        def dies(*a, **k):
            if os.getpid() != here:  # the child, once it took this one
                os.kill(os.getpid(), signal.SIGKILL)
            return regather(*a, **k)
        per_rank.data_movement, per_rank.regather_ms = held, dies
        both = per_rank.run_job(per_rank.RankJob(path, helpers=2))
        out = [same(both, alone), here]
        """)
    assert out[0] is True
    assert any(pid != out[1] for name, pid in _taken(path))  # the child did take sections before it died
