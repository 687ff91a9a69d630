"""Peak memory of a whole process tree (a command and every worker it forks), sampled from /proc.

Two sums are kept: RSS (what `top` shows; pages shared between a parent and its forked workers count
once per process, so it overstates) and PSS (each shared page split among its sharers: the tree's real
footprint). Sampling every `interval` seconds can miss a peak shorter than that; the child's own
getrusage maxima (reported beside) are exact per process, but not summed over the tree.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(pid: int) -> list[int]:
    """pid and all its descendants alive now."""
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return _rss(pid)


class TreeSampler:
    """Samples the tree under `pid` in a thread until stop(); `peak_rss` and `peak_pss` in bytes."""

    def __init__(self, pid: int, interval: float = 0.02):
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0
        self.max_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        kids_every, n = 10, 0
        pids = [self.pid]
        while not self._stop.is_set():
            if n % kids_every == 0:  # listing /proc is the costly part: refresh the tree now and then
                pids = tree(self.pid)
            n += 1
            self.max_procs = max(self.max_procs, len(pids))
            self.peak_rss = max(self.peak_rss, sum(_rss(p) for p in pids))
            self.peak_pss = max(self.peak_pss, sum(_pss(p) for p in pids))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_sampled(cmd: list[str], timeout: float | None = None,
                env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """Runs `cmd`, sampling its tree; returns the completed process and {peak_rss, peak_pss, procs, wall}."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    s = TreeSampler(p.pid)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for q in reversed(tree(p.pid)):
            try:
                os.kill(q, 9)
            except OSError:
                pass
        out, err = p.communicate()
        err += f"\ntimed out after {timeout:.0f} s"
    finally:
        s.stop()
    done = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    return done, {"peak_rss": s.peak_rss, "peak_pss": s.peak_pss, "procs": s.max_procs,
                  "wall_outer": time.perf_counter() - t0}
