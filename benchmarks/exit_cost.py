"""What a whole `llmdiag analyze` process pays after its last exit handler: the interpreter's teardown (issue 37).

Python's own exit frees every module, array and summary object one by one; the command's entry
(`cli/main.py` `entry`) runs the exit handlers, flushes stdout/stderr and leaves by `os._exit`, the kernel
freeing the process at once. Each run is a fresh `analyze TRACE -q --json J --report H` process whose first
registered exit handler (so the last to run) writes the monotonic clock and the CPU time of the process and of
the children it reaped (the forked ones are reaped by an earlier handler) to a pipe; the
parent reads the clock again as soon as `wait4` returns. The difference, wall and CPU, is what the process
still cost after that handler: the teardown, the exit, the reaping. The same tree both ways, `main()` (Python's
exit) against `entry()`, alternated run by run; the minimum and the median over `--repeats` (the minimum is the
steadier figure on a loaded machine).

    python -m benchmarks.exit_cost [--repeats 8] [--cases sampled_pair,nccl_data]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from benchmarks.whole_command import REAL, ROOT, cases

_WRAP = """
import atexit, os, resource, sys, time
def last():
    cpu = sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
    os.write(int(os.environ["LLMDIAG_EXIT_FD"]), f"{time.monotonic()} {cpu}".encode())
atexit.register(last)
sys.argv = ["llmdiag", *sys.argv[1:]]
from llmdiag.diagnose.cli.main import entry, main
entry() if os.environ["LLMDIAG_EXIT_SIDE"] == "entry" else main()
"""
SIDES = ("python exit", "entry")


def after_last_handler(side: str, path: str, out: str) -> tuple[float, float]:
    """(wall ms, cpu ms) from the last exit handler of one `analyze` process to its reaping."""
    r, w = os.pipe()
    env = dict(os.environ, PYTHONPATH=ROOT, LLMDIAG_EXIT_FD=str(w), LLMDIAG_EXIT_SIDE="entry" if side == "entry" else "main")
    argv = [sys.executable, "-c", _WRAP, "analyze", path, "-q", "--json", os.path.join(out, "s.json"),
            "--report", os.path.join(out, "r.html")]
    p = subprocess.Popen(argv, env=env, pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=out)
    os.close(w)
    _, status, ru = os.wait4(p.pid, 0)
    end = time.monotonic()
    with open(r, "rb") as f:
        got = f.read().split()
    if os.waitstatus_to_exitcode(status) not in (0, 1) or len(got) != 2:
        raise RuntimeError(f"{side} on {path}: exit status {os.waitstatus_to_exitcode(status)}")
    return 1e3 * (end - float(got[0])), 1e3 * (ru.ru_utime + ru.ru_stime - float(got[1]))


def measure(names: list[str] | None = None, repeats: int = 8) -> dict:
    import tempfile

    load0 = os.getloadavg()[0]
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="llmdiag-exit-") as out:
        for name, path, _ in cases(REAL, names):
            runs: dict = {s: [] for s in SIDES}
            for i in range(max(1, repeats)):
                for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
                    runs[side].append(after_last_handler(side, path, out))
            res[name] = {s: {"wall_min": min(x[0] for x in v), "wall_med": statistics.median(x[0] for x in v),
                             "cpu_min": min(x[1] for x in v), "cpu_med": statistics.median(x[1] for x in v)}
                         for s, v in runs.items()}
    return {"cases": res, "repeats": repeats, "load_start": load0, "load_end": os.getloadavg()[0]}


def line(m: dict) -> str:
    rows = [f"after the last exit handler (ms, min / median of {m['repeats']}), load {m['load_start']:.1f} -> "
            f"{m['load_end']:.1f}:"]
    for name, c in m["cases"].items():
        rows.append(f"  {name}: " + "; ".join(f"{s} wall {c[s]['wall_min']:.1f} / {c[s]['wall_med']:.1f}, cpu "
                                               f"{c[s]['cpu_min']:.1f} / {c[s]['cpu_med']:.1f}" for s in SIDES))
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--cases", help="comma-separated case names of benchmarks/whole_command.py (default: all)")
    a = ap.parse_args(argv)
    from benchmarks.run import byte_compile

    byte_compile()
    print(line(measure(a.cases.split(",") if a.cases else None, a.repeats)))


if __name__ == "__main__":
    main()
