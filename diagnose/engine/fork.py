"""Small inputs on two cores: their jobs in one forked child while this process does other work.

Below MIN_BYTES_PER_WORKER per worker a process pool costs more than it saves (its import alone is ~20 ms), so
a small input's jobs ran in this process, one after the other, while the second core idled; and this process
still had the next stages' imports to pay (the rules, the summary writer, jinja2 and the report: ~25 ms of a
0.2-0.6 s command). Here the jobs go to one child made by a bare `os.fork` (no multiprocessing: nothing to
import, the child inherits the loaded modules), which sends their outputs back pickled through a pipe (20-35
kB a rank, ~0.2 ms each way), while this process runs `meanwhile` (those imports) and, with two jobs or
more, its share of the jobs, the largest going to the child. The outputs are the jobs' own, in job order,
whichever process ran them.

Only where the caller opts in (`EngineSpec.meanwhile`, the command line), on Linux, with a second core and
no other thread in this process (a fork copies only the calling thread). A child that dies (the OOM killer, a
signal) costs only its jobs, each named as failed like a pool worker's; a fork that fails runs everything
here, as before.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys

from llmdiag.diagnose.engine.work import Work, failure_line


def usable(meanwhile, n_workers: int) -> bool:
    """Whether to fork: opted in, allowed a second worker, on Linux, and the only thread here."""
    threading = sys.modules.get("threading")
    return (meanwhile is not None and n_workers > 1 and sys.platform == "linux" and hasattr(os, "fork")
            and (threading is None or threading.active_count() == 1))


def split(order: list[int], sizes: list[int]) -> tuple[list[int], list[int]]:
    """(the child's jobs, this process's jobs), largest first to the side with fewer bytes so far; this process
    starts one job's share behind (it runs `meanwhile` too), so a lone job goes to the child."""
    mine: list[int] = []
    theirs: list[int] = []
    load = [0, max(sizes, default=0) // 4 + 1]  # child, this process
    for k in order:
        side = 0 if load[0] <= load[1] else 1
        (theirs if side == 0 else mine).append(k)
        load[side] += sizes[k]
    return theirs, mine


def run_forked(jobs: list, order: list[int], sizes: list[int], work: Work, meanwhile, keep) -> bool:
    """`keep(k, output)` for every job, its share run in a forked child; False (nothing run) if no child could
    be made: the caller runs them here."""
    theirs, mine = split(order, sizes)
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no memory for the page tables, a process limit: run everything here
        os.close(r)
        os.close(w)
        return False
    if pid == 0:  # the child: its jobs, their outputs through the pipe, and out without any exit handler
        code = 1
        try:
            os.close(r)
            data = pickle.dumps([work.fn(jobs[k]) for k in theirs], pickle.HIGHEST_PROTOCOL)
            with open(w, "wb") as f:
                f.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    try:
        quietly(meanwhile)
        for k in mine:
            keep(k, work.fn(jobs[k]))
        with open(r, "rb") as f:
            data = f.read()
    except BaseException:  # Ctrl-C here: the child is not left writing to a pipe no one reads
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    outs = _outputs(data, len(theirs), work)
    why = _death(status)
    for j, k in enumerate(theirs):
        keep(k, outs[j] if outs is not None else work.failed(jobs[k], failure_line(jobs[k], why)))
    return True


def quietly(meanwhile) -> None:
    """`meanwhile` only warms what comes next: whatever it raises, the stage that needs it raises again."""
    try:
        meanwhile()
    except Exception:
        pass


def _outputs(data: bytes, n: int, work: Work) -> list | None:
    try:
        outs = pickle.loads(data) if data else None
    except Exception:  # cut short: the child died writing
        return None
    if not isinstance(outs, list) or len(outs) != n or not all(isinstance(o, work.out) for o in outs):
        return None
    return outs


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return f"the worker analysing this trace died (killed by signal {sig} ({name}" + \
            f"{'; the out-of-memory killer?' if sig == 9 else ''}))"
    return f"the worker analysing this trace died (exit status {os.waitstatus_to_exitcode(status)})"
