"""Small inputs on two cores: their jobs in one forked child while this process does other work.

Below MIN_BYTES_PER_WORKER per worker a process pool costs more than it saves (its import alone is ~20 ms), so
a small input's jobs ran in this process, one after the other, while the second core idled; and this process
still had the next stages' imports to pay (the rules, the summary writer, jinja2 and the report: ~25 ms of a
0.2-0.6 s command). Here the jobs go to one forked child (io/forked.py: the loaded modules inherited, the
outputs pickled back, 20-35 kB a rank, ~0.2 ms each way), while this process runs `meanwhile` (those
imports) and, with two jobs or more, its share of the jobs, the largest going to the child. The outputs are
the jobs' own, in job order, whichever process ran them.

Only where the caller opts in (`EngineSpec.meanwhile`, the command line), with a second worker allowed, on
Linux and with no other thread here. A child that dies (the OOM killer, a signal) costs only its jobs, each
named as failed like a pool worker's; a fork that fails runs everything here, as before.
"""

from __future__ import annotations

import os
import signal

from llmdiag.diagnose.engine.work import Work, failure_line
from llmdiag.diagnose.io import forked


def NOTHING() -> None:
    """`meanwhile` when this process has nothing left to do meanwhile (its imports were made while the traces
    were parsed ahead: io/ahead.py): a lone job then runs here, two or more are still shared with a child."""


def usable(meanwhile, n_workers: int, n_jobs: int = 1) -> bool:
    """Whether to fork: opted in, allowed a second worker, something to run beside the child, and forked.usable()."""
    return (meanwhile is not None and n_workers > 1 and (meanwhile is not NOTHING or n_jobs > 1)
            and forked.usable())


def split(order: list[int], sizes: list[int], head: bool = True) -> tuple[list[int], list[int]]:
    """(the child's jobs, this process's jobs), largest first to the side with fewer bytes so far; with `head`
    this process starts one job's share behind (it runs `meanwhile` too), so a lone job goes to the child."""
    mine: list[int] = []
    theirs: list[int] = []
    load = [0, max(sizes, default=0) // 4 + 1 if head else 0]  # child, this process
    for k in order:
        side = 0 if load[0] <= load[1] else 1
        (theirs if side == 0 else mine).append(k)
        load[side] += sizes[k]
    return theirs, mine


def run_forked(jobs: list, order: list[int], sizes: list[int], work: Work, meanwhile, keep) -> bool:
    """`keep(k, output)` for every job, its share run in a forked child; False (nothing run) if no child could
    be made: the caller runs them here."""
    theirs, mine = split(order, sizes, meanwhile is not NOTHING)
    try:
        child = forked.Forked(lambda: [work.fn(jobs[k]) for k in theirs])
    except OSError:  # no memory for the page tables, a process limit: run everything here
        return False
    quietly(meanwhile)
    for k in mine:
        keep(k, work.fn(jobs[k]))
    ok, outs = child.take()
    if not (ok and isinstance(outs, list) and len(outs) == len(theirs) and all(isinstance(o, work.out) for o in outs)):
        why = _death(child.status or 0)
        outs = [work.failed(jobs[k], failure_line(jobs[k], why)) for k in theirs]
    for k, out in zip(theirs, outs):
        keep(k, out)
    return True


def quietly(meanwhile) -> None:
    """`meanwhile` only warms what comes next: whatever it raises, the stage that needs it raises again."""
    try:
        meanwhile()
    except Exception:
        pass


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return f"the worker analysing this trace died (killed by signal {sig} ({name}" + \
            f"{'; the out-of-memory killer?' if sig == 9 else ''}))"
    return f"the worker analysing this trace died (exit status {os.waitstatus_to_exitcode(status)})"
