"""The Dask options as attacks: scheduler files that block or never end, peers that refuse, never answer or
are no address at all, and a LocalCluster sized by the user alone. Every wait stays within the documented
connect timeout (30 s, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT); set to 3 s here so the bound is tested."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from tests.adversarial.conftest import attack, check

pytest.importorskip("distributed")
CONNECT_S = 3
ENV = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": f"{CONNECT_S}s", "DASK_SCHEDULER_ADDRESS": ""}


@pytest.fixture(autouse=True)
def _no_thread_outlives_its_test():
    """A thread an attack starts ends with it: one left blocked in accept() raised later, under another test."""
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before]
    for t in left:
        t.join(timeout=2)
    assert not [t for t in left if t.is_alive()], left


def analyze(tmp_path, run, *opts):
    return attack("analyze", run, "--no-report", "-q", "--json", tmp_path / "s.json", *opts, cwd=tmp_path, env=ENV)


def test_scheduler_file_fifo(tmp_path, run):
    os.mkfifo(tmp_path / "sched.json")
    check(analyze(tmp_path, run, "--scheduler-file", tmp_path / "sched.json"), 2, "not a regular file (a named pipe)")


def test_scheduler_file_dev_zero(tmp_path, run):
    check(analyze(tmp_path, run, "--scheduler-file", "/dev/zero"), 2, "not a regular file (a device)")


def test_scheduler_file_huge(tmp_path, run):
    with open(tmp_path / "sched.json", "wb") as f:
        f.truncate(1536 << 20)  # 1.5 GB (sparse), read whole before
    check(analyze(tmp_path, run, "--scheduler-file", tmp_path / "sched.json"), 2, "larger than its 1 MiB budget")


@pytest.mark.parametrize("address, words", [
    ("tcp://127.0.0.1:99999", "a port from 1 to 65535"),
    ("tcp://127.0.0.1:1", "Connection refused"),  # nothing listens on port 1: refused at once
])
def test_address_fails_at_once(tmp_path, run, address, words):
    r = analyze(tmp_path, run, "--scheduler", address)
    check(r, 2, "cannot reach the Dask scheduler", words)
    assert r.wall_s < CONNECT_S + 10  # not the connect timeout: the interpreter's start is most of it


def test_a_silent_listener_fails_at_the_connect_timeout(tmp_path, run):
    """It accepts and never speaks Dask: the wait ran past 120 s before."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.1)  # the accept loop polls `stop`: closing the socket does not wake a blocked accept()
    held: list = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        r = analyze(tmp_path, run, "--scheduler", f"tcp://127.0.0.1:{srv.getsockname()[1]}")
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    check(r, 2, "cannot reach the Dask scheduler", f"no Dask handshake within {CONNECT_S} s")


def test_a_silent_listener_is_refused_within_the_handshake_bound():
    """With Dask's default 30 s connect timeout, a peer that accepts and says nothing is refused after the
    handshake bound (5 s), inside the 10 s every attack gets."""
    import time

    from llmdiag.diagnose.engine.dask_engine import HANDSHAKE_S, _probe
    from llmdiag.diagnose.errors import LlmdiagError

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(LlmdiagError, match=f"no Dask handshake within {HANDSHAKE_S:g} s"):
            _probe(f"tcp://127.0.0.1:{srv.getsockname()[1]}", 30.0)
        assert time.monotonic() - t0 < HANDSHAKE_S + 3
    finally:
        srv.close()


def test_dask_local_is_sized_by_the_traces(tmp_path, run):
    """--dask-local 4096 for 2 traces: 2 workers (at most one per trace and per core), the same numbers."""
    r = analyze(tmp_path, run, "--dask-local", "4096")
    check(r, 0, one_line=False)
    assert (tmp_path / "s.json").exists()
