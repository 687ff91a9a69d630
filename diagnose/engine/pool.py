"""The local engine, the default on one machine: the per-rank jobs in a process pool on this host.

A worker killed mid-trace (the OOM killer, a signal) breaks the whole pool; the traces not yet done are then
each run in a process of their own, so the kill costs only the trace that caused it: named as failed, the
others kept.
"""

from __future__ import annotations

import signal

from llmdiag.diagnose.engine.fork import quietly, run_forked, usable
from llmdiag.diagnose.engine.progress import Progress
from llmdiag.diagnose.engine.work import Work, failure_line

MIN_BYTES_PER_WORKER = 1 << 18  # on disk (~2.5 MB of JSON, ~25 ms to parse): less is cheaper than forking a worker


def run_pool(jobs: list, sizes: list[int], n_workers: int, work: Work, bar: Progress, meanwhile=None) -> list:
    """Outputs in the order of `jobs`. Largest files go first, so one big rank does not finish alone at the
    end; small inputs run in this process (a pool would cost more than the parse), or, with `meanwhile` (work
    for this process: engine/fork.py), in one forked child while this process does it."""
    n, fn = len(jobs), work.fn
    allowed = n_workers
    n_workers = workers(sizes, allowed)
    order = sorted(range(n), key=lambda k: -sizes[k])
    out: list = [None] * n

    def keep(k: int, res) -> None:
        out[k] = res
        bar.advance(sizes[k])

    if n_workers <= 1:
        if usable(meanwhile, allowed, n) and run_forked(jobs, order, sizes, work, meanwhile, keep):
            return out
        for k in order:  # `meanwhile` is left to happen where its imports are first needed, as before
            keep(k, fn(jobs[k]))
        return out
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor  # 20 ms: paid only where a pool starts
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=n_workers) as ex:
            results = ex.map(fn, (jobs[k] for k in order), chunksize=1)  # every job submitted
            if meanwhile is not None:
                quietly(meanwhile)
            for k, res in zip(order, results):
                keep(k, res)
    except BrokenProcessPool:  # a worker was killed (OOM killer, a signal): find which trace, keep the rest
        left = [k for k in order if out[k] is None]
        with ThreadPoolExecutor(max_workers=n_workers) as tp:
            for k, res in zip(left, tp.map(lambda k: _isolated(jobs[k], work), left)):
                keep(k, res)
    return out


def workers(sizes: list[int], allowed: int) -> int:
    """The pool's size for files of these sizes on disk: 1 means no pool (this process, or one forked child)."""
    return max(1, min(allowed, len(sizes), sum(sizes) // MIN_BYTES_PER_WORKER))


def _isolated(job, work: Work):
    """`fn(job)` in a process of its own, so a worker killed by the OOM killer or a signal costs only the
    trace it was analysing: that rank comes back as an error naming the signal, the others as usual."""
    import multiprocessing  # only once a worker died: the pool itself comes from concurrent.futures

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(job, work.fn, send), daemon=True)
    p.start()
    send.close()
    try:
        res = recv.recv()
    except (EOFError, OSError):
        res = None
    finally:
        recv.close()
        p.join()
    if isinstance(res, work.out):
        return res
    code = p.exitcode
    how = (f"killed by signal {-code} ({signal.Signals(-code).name}{'; the out-of-memory killer?' if -code == 9 else ''})"
           if code is not None and code < 0 and -code in signal.valid_signals() else f"exit status {code}")
    return failed(job, work, f"the worker analysing this trace died ({how})")


def failed(job, work: Work, why: str):
    """The output of a job the engine could not run: one line naming the file, the others carry on."""
    return work.failed(job, failure_line(job, why))


def _child(job, fn, conn) -> None:
    try:
        conn.send(fn(job))
    finally:
        conn.close()
