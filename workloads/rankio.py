"""What one rank writes besides its trace: its log file and its result record. Torch-free.

The log is a redirect of the process's own file descriptors 1 and 2, done before torch is imported, so it
also catches C++ output (gloo, NCCL, `terminate called ...`) and a crash at import. The result record
`results/rank<R>.json` is rewritten atomically at start (`running`), after every step (`last_step`) and at the
end (`ok` or `failed` with the traceback): a rank killed by a signal leaves `running` behind, which is how the
launcher tells a killed rank from one that finished, whatever the exit code (ranks leave with os._exit).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from datetime import datetime, timezone


def now_iso() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def atomic_write_json(path: str, data: dict) -> None:
    """Through a mkstemp file in the target folder (O_EXCL, no symlink followed, unpredictable name), renamed;
    removed on any error, so a full disk leaves neither a half record nor a temp file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send `sig` to this process when its parent (torchrun) dies, so a rank never outlives
    its launcher under PID 1 (an ssh drop, `kill -9` of `llmdiag run`). False where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # the parent died before the request: act on it now
        os.kill(os.getpid(), sig)
    return True


def redirect_output(out_dir: str, rank: int) -> int:
    """Send fds 1 and 2 to logs/rank<R>.log (append); return a duplicate of the original stdout for progress.
    This is the first thing a rank does, so it also ties the rank's life to torchrun's (die_with_parent)."""
    die_with_parent()
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    original = os.dup(1)
    fd = os.open(os.path.join(out_dir, "logs", f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    return original


class ResultRecord:
    """results/rank<R>.json: the rank's own account of how it went."""

    def __init__(self, out_dir: str, rank: int, world_size: int, local_rank: int):
        os.makedirs(os.path.join(out_dir, "results"), exist_ok=True)
        self.path = os.path.join(out_dir, "results", f"rank{rank}.json")
        self.data: dict = {
            "rank": rank, "world_size": world_size, "local_rank": local_rank, "host": socket.gethostname(),
            "pid": os.getpid(), "status": "running", "last_step": None, "started_at": now_iso(),
            "finished_at": None, "error": None, "trace": None, "losses": None, "local_losses": None,
            "step_times_ms": [], "profiled_step_ms": None, "unprofiled_step_ms": None,
        }
        self._t0 = time.time()
        self.write()

    def update(self, **kw) -> None:
        self.data.update(kw)
        self.write()

    def write(self) -> None:
        atomic_write_json(self.path, self.data)

    def finish(self, status: str, error: str | None = None) -> None:
        self.update(status=status, error=error, finished_at=now_iso(), ended_time=time.time(),
                    wall_s=round(time.time() - self._t0, 3))
