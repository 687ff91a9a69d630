"""A function run in a forked child, its value sent back pickled through a pipe: the second core of a small run.

A bare `os.fork` (no multiprocessing: nothing to import, ~1 ms for the page tables) hands the child every
loaded module and every array of the trace as they are, copy-on-write; only the function's value travels back
(`Forked.take`), and, with `later`, one value the child waits for (`Forked.send`: an input this process computes
meanwhile). Used by the engine (a small input's jobs while the command imports its outputs' modules:
engine/fork.py), by the command's parse ahead (io/ahead.py), and by one rank's analysis (its critical path while the
other metrics run: metrics/rank/per_rank.py through `Beside`, the sections left when either side is done shared
through `Shares`).

Only on Linux, where this process runs no other thread (a fork copies the calling thread alone: a lock
another thread held would stay held in the child), and where a core is likely idle (`idle_core`: on a machine
whose cores are all busy the child's costs buy nothing). The child leaves with `os._exit`: no exit handler, no
buffered output written twice. A child that raises sends nothing, one that is killed sends nothing: the caller
sees `take()` fail and decides (the engine names the trace as failed, `Beside` computes the value here).
"""

from __future__ import annotations

import atexit
import gc
import os
import pickle
import signal
import sys


def usable() -> bool:
    """Whether a fork is safe and useful here: Linux, no other thread in this process, and a core to spare."""
    threading = sys.modules.get("threading")
    return (sys.platform == "linux" and hasattr(os, "fork") and (threading is None or threading.active_count() == 1)
            and idle_core())


def idle_core() -> bool:
    """Whether another core is likely idle: the last minute's load average (this process included) below the
    cores this process may use. On a busy machine the child only competes for the same cores and its costs
    (~5,000-8,000 more page faults, the first call of every metric paid twice: 10-30 ms of CPU) are lost."""
    try:
        cores = len(os.sched_getaffinity(0))
        return cores > 1 and os.getloadavg()[0] < cores
    except (AttributeError, OSError):
        return False


def _read_all(fd: int) -> bytes:
    with open(fd, "rb") as f:
        return f.read()


def _write_all(fd: int, data: bytes) -> None:
    with open(fd, "wb") as f:
        f.write(data)


class Forked:
    """`fn(*args)` (with `later`: `fn(*args, get)`, `get()` returning what `send` sent) in a forked child. Raises
    OSError where no child can be made; `take()` is (True, the value) or (False, None) and reaps the child, whose
    wait status is then `status`."""

    def __init__(self, fn, *args, later: bool = False) -> None:
        self.status: int | None = None
        self._in: int | None = None
        self._out: int | None = None
        out_r, out_w = os.pipe()
        in_r = in_w = -1
        if later:
            in_r, in_w = os.pipe()
        # Everything alive now is frozen out of the collector's passes (until `take`): a pass in either process
        # writes into the header of every object it scans, and each page so written is copied. Without it the
        # child's parse collected over the parent's ~10^5 objects: ~6,000 more page faults, 20-30 ms a run.
        self._thaw = gc.get_freeze_count() == 0  # a caller's own freeze is left as it was
        _reap()
        gc.freeze()
        try:
            pid = os.fork()
        except OSError:
            self._unfreeze()
            for fd in (out_r, out_w, in_r, in_w):
                if fd >= 0:
                    os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(out_r)
            if later:
                os.close(in_w)
            _child(fn, args, out_w, in_r if later else None)
        os.close(out_w)
        if later:
            os.close(in_r)
            self._in = in_w
        self.pid, self._out = pid, out_r

    def send(self, value) -> None:
        """The child's `get()` value; a child already gone is found by `take`."""
        if self._in is None:
            return
        fd, self._in = self._in, None
        try:
            _write_all(fd, pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
        except BrokenPipeError:
            pass

    def take(self) -> tuple[bool, object]:
        if self._in is not None:  # never sent: the child must not wait for it
            os.close(self._in)
            self._in = None
        fd, self._out = self._out, None  # the reader owns it now, and closes it
        if fd is None:
            raise RuntimeError("take() called twice")
        try:
            data = _read_all(fd)
        except BaseException:
            self.close()
            raise
        self._unfreeze()
        try:
            value = pickle.loads(data) if data else _NOTHING
        except Exception:  # cut short: the child died writing
            value = _NOTHING
        if value is _NOTHING:
            _, self.status = os.waitpid(self.pid, 0)  # how it died, for the caller to say
            return False, None
        # Sent in full: the child is leaving. Its exit (unmapping the trace's memory: ms) is not waited for
        # here; it is reaped at the next fork, else when this process exits (so its CPU time is still counted
        # as this process's children's, as a pool worker's is).
        self.status = 0
        _UNREAPED.append(self.pid)
        if len(_UNREAPED) == 1:
            atexit.register(_reap, True)
        return True, value

    def close(self) -> None:
        """Stop a child whose value is no longer wanted (this process raised meanwhile) and reap it."""
        if self.status is not None:
            return
        for fd in (self._in, self._out):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._in = self._out = None
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, self.status = os.waitpid(self.pid, 0)
        self._unfreeze()

    def _unfreeze(self) -> None:
        if self._thaw:
            self._thaw = False
            gc.unfreeze()

    def __del__(self) -> None:
        if getattr(self, "status", 0) is None and hasattr(self, "pid"):
            self.close()


_NOTHING = object()
_UNREAPED: list[int] = []  # children that sent their value and were not waited for


def _reap(wait: bool = False) -> None:
    for pid in _UNREAPED[:]:
        try:
            done, _ = os.waitpid(pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere
            done = pid
        if done:
            _UNREAPED.remove(pid)


def _child(fn, args, out: int, get_fd: int | None) -> None:
    code = 1
    try:
        if get_fd is not None:
            args = (*args, lambda: pickle.loads(_read_all(get_fd)))
        data = pickle.dumps(fn(*args), pickle.HIGHEST_PROTOCOL)
        _write_all(out, data)
        _reap(True)  # its own children (the rank's critical path): their time counted in this one's
        code = 0
    finally:
        os._exit(code)


class Shares:
    """Pieces of work 0..n-1, each handed to whichever process asks first: this one and a child forked after it
    alike. One byte per piece in a pipe both hold, its writing end closed: each read takes a piece no other read
    gets, and an empty pipe reads as the end. So the side that finishes its own part first takes what is left,
    with no scheduler, and with no child this process takes them all."""

    def __init__(self, n: int, forking: bool = True) -> None:
        """`forking` False: no child will share them (a pool's worker), so no pipe: this process takes them all."""
        if not 0 <= n <= 256:
            raise ValueError(f"{n} pieces: a byte each, at most 256")
        self._fd: int | None = None
        self._left = iter(range(n))
        if forking:
            r, w = os.pipe()
            try:
                os.write(w, bytes(range(n)))  # far below a pipe's capacity: never blocks
            finally:
                os.close(w)
            self._fd = r

    def next(self) -> int | None:
        """The next piece nobody took, or None once all are taken."""
        if self._fd is None:
            return next(self._left, None)
        got = os.read(self._fd, 1)
        if got:
            return got[0]
        self.close()
        return None

    def close(self) -> None:
        self._left = iter(())
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


class Beside:
    """`fn(*args, get)` computed beside this process (in a forked child, when `fork` and `usable()`), or here at
    `result()`: one value either way, the same one; a child that failed is made up for here, where the error
    it met (if any) is raised as it would have been. `get()` returns what `send` sent."""

    def __init__(self, fork: bool, fn, *args) -> None:
        self.fn, self.args, self.sent = fn, args, None
        self.child: Forked | None = None
        if fork and usable():
            try:
                self.child = Forked(fn, *args, later=True)
            except OSError:  # no memory for the page tables, a process limit: computed here
                pass

    def send(self, value) -> None:
        self.sent = value
        if self.child is not None:
            self.child.send(value)

    def result(self):
        if self.child is not None:
            ok, value = self.child.take()
            self.child = None
            if ok:
                return value
        return self.fn(*self.args, lambda: self.sent)
