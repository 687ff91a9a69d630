"""io/forked.py: a value computed in a forked child is the value computed here; the child gets what `send` sent
when it asks; a child that raises or is killed is made up for here (where its error is raised as usual); a
child no longer wanted is stopped and reaped; children that sent their value are reaped by exit. Each case
runs in a fresh interpreter: a thread another test left running rightly turns the fork off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(sys.platform != "linux" or not hasattr(os, "fork"), reason="forks on Linux only")


def _fresh(body: str) -> list:
    code = textwrap.dedent("""
        import json, os, signal
        from llmdiag.diagnose.io import forked
        from llmdiag.diagnose.io.forked import Beside, Forked
        forked.idle_core = lambda: True  # as on a quiet machine, whatever the load here
        here = os.getpid()
        """) + textwrap.dedent(body) + "\nprint('OUT', json.dumps(out))\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.split("OUT ", 1)[1])


def test_beside_gives_the_same_value_from_the_child():
    out = _fresh("""
        def f(a, b, get):
            return [a + b, get() * 2, os.getpid()]

        values = []
        for fork in (True, False):
            b = Beside(fork, f, 1, 2)
            b.send(21)
            values.append(b.result())
        out = [values[0][:2], values[1][:2], values[0][2] != here, values[1][2] == here]
        """)
    assert out == [[3, 42], [3, 42], True, True]


def test_a_child_that_raises_or_is_killed_is_made_up_for_here():
    out = _fresh("""
        calls = []

        def boom(get):
            calls.append(os.getpid())
            if os.getpid() != here:
                raise ValueError("in the child")
            return get()

        def die(get):
            if os.getpid() != here:
                os.kill(os.getpid(), signal.SIGKILL)
            return get() + 1

        b = Beside(True, boom)
        b.send(5)
        c = Beside(True, die)
        c.send(5)
        out = [b.result(), calls == [here], c.result()]

        def always(get):
            raise KeyError("everywhere")

        d = Beside(True, always)
        d.send(0)
        try:
            d.result()
        except KeyError as e:
            out.append(str(e))
        """)
    assert out == [5, True, 6, "'everywhere'"]


def test_an_unwanted_child_is_stopped_and_a_finished_one_reaped():
    """Forked.close kills a child still waiting for its input; a child that sent its value is left to exit on
    its own and reaped at the next fork (or at exit): no zombie either way."""
    out = _fresh("""
        import time
        f = Forked(lambda get: get(), later=True)  # waits for a value that never comes
        pid = f.pid
        f.close()
        gone = not os.path.exists(f"/proc/{pid}")
        g = Forked(lambda: 7)
        ok, v = g.take()
        time.sleep(0.2)
        Forked(lambda: 0).take()  # reaps g
        out = [gone, f.status is not None, [ok, v], not os.path.exists(f"/proc/{g.pid}")]
        """)
    assert out == [True, True, [True, 7], True]


def test_no_fork_where_every_core_is_busy(monkeypatch):
    """The last minute's load at or above the cores this process may use: the value is computed here."""
    from llmdiag.diagnose.io import forked

    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(forked.os, "getloadavg", lambda: (2.0, 0.5, 0.5))
    assert not forked.idle_core()
    b = forked.Beside(True, lambda get: (os.getpid(), get()))
    b.send(3)
    assert b.child is None and b.result() == (os.getpid(), 3)
    monkeypatch.setattr(forked.os, "getloadavg", lambda: (1.2, 3.0, 3.0))
    assert forked.idle_core()
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0})
    assert not forked.idle_core()


def test_shares_hand_each_piece_to_one_process_whichever_asks_first():
    """200 pieces drained by this process and a forked child at once: each taken exactly once, both took some;
    with no child, this process takes them all; past 256 pieces (a byte each) it refuses."""
    out = _fresh("""
        import time
        from llmdiag.diagnose.io.forked import Shares

        def drain(shares, get):
            got = []
            while (k := shares.next()) is not None:
                got.append(k)
                time.sleep(0.0005)
            return got

        s = Shares(200)
        b = Beside(True, drain, s)
        b.send(None)
        mine = drain(s, None)
        theirs = b.result()
        alone = [drain(Shares(5), None), drain(Shares(3, forking=False), None)]  # no pipe: a pool's worker
        try:
            Shares(257)
            refused = False
        except ValueError:
            refused = True
        out = [sorted(mine + theirs) == list(range(200)), bool(mine), bool(theirs), alone, refused]
        """)
    assert out == [True, True, True, [[0, 1, 2, 3, 4], [0, 1, 2]], True]
