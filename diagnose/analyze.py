"""`analyze`: a run folder or trace folder in, the typed Analysis (with its findings) out.

The stages in order: discover the files (io), parse each rank in a worker process (metrics.per_rank; only
summaries come back), assemble the ranks (metrics.cross_rank), then run the rules.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import socket
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from diagnose import __version__
from diagnose.io.discover import discover
from diagnose.io.loader import file_size
from diagnose.io.megatron_ops import find_op_table
from diagnose.metrics.cross_rank import assemble, stage_hint
from diagnose.metrics.per_rank import RankJob, RankOutput, default_jobs, run_job
from diagnose.model.analysis import Analysis, AnalysisOptions, Issue
from diagnose.model.summary import manifest_from_dict


def analyze_path(path, *, comm_regex: str | None = None, exclude_last_step: bool = False, jobs: int | None = None,
                 progress: bool = False, top_k: int = 20, rules: bool = True) -> Analysis:
    if isinstance(path, str) and (table := find_op_table(path)):  # the straggler study's op tables: a kind of their own
        from diagnose.simulate.op_table import analyse_op_table

        analysis = analyse_op_table(table, __version__)
        if rules:
            from diagnose.rules import findings

            analysis.findings = findings(analysis)
        return analysis
    src = discover(path)
    man = manifest_from_dict(src.manifest, src.path) if src.manifest is not None else None
    cpu_cap = man.device.memory_bytes if man and man.device and man.device.type == "cpu" else None
    job_list = [RankJob(f, comm_regex, exclude_last_step, stage_hint(man, f), cpu_cap, top_k) for f in src.files]
    outputs = _run_all(job_list, jobs or default_jobs(), progress)
    opts = AnalysisOptions(comm_regex=comm_regex, exclude_last_step=exclude_last_step, files=len(src.files),
                           run_folder=bool(src.run_folder))
    analysis = assemble(outputs, man, source=src.path, name=src.name, skipped=src.skipped, opts=opts,
                        version=__version__)
    from diagnose.simulate.kineto import kineto_whatif
    from diagnose.simulate.replay import complete_from_outputs

    complete_from_outputs(analysis, [o for o in outputs if not o.error], bool(man and man.oversubscribed))
    analysis.whatif = kineto_whatif([o for o in outputs if not o.error], analysis.ranks_missing)
    if man is not None and (why := _stale(man)):
        analysis.issues.append(Issue(src.path, why, None, "warning"))
    if rules:
        from diagnose.rules import findings

        analysis.findings = findings(analysis)
    return analysis


def _stale(man) -> str | None:
    """A manifest still `running` whose launcher is gone (killed with SIGKILL, the machine rebooted) was
    never finalised: marked `stale` here, so nothing (the gate included) takes it for a run in progress or
    a good one. Its launcher's pid is checked on the launcher's own host only."""
    if man.status != "running":
        return None
    launch = man.launch if isinstance(man.launch, dict) else {}
    pid, host = launch.get("pid"), launch.get("host")
    if type(pid) is not int or pid <= 0 or host != socket.gethostname():
        return "the manifest says the run is still running (its launcher cannot be checked from here)"
    try:
        os.kill(pid, 0)
        return f"the run is still in progress (launcher pid {pid} is alive): numbers may be partial"
    except ProcessLookupError:
        pass
    except PermissionError:
        return f"the run is still in progress (launcher pid {pid} exists): numbers may be partial"
    man.status = "stale"
    man.failure = {"reason": f"the launcher (pid {pid}) is gone and never finalised the manifest (killed?)"}
    return f"stale run: {man.failure['reason']}"


MIN_BYTES_PER_WORKER = 1 << 18  # on disk (~2.5 MB of JSON, ~25 ms to parse): less is cheaper than forking a worker


def _run_all(jobs: list[RankJob], n_workers: int, progress: bool) -> list[RankOutput]:
    """Outputs in the order of `jobs`. Largest files go first, so one big rank does not finish alone at the
    end; small inputs run in this process (forking workers would cost more than the parse)."""
    n = len(jobs)
    show = progress and sys.stderr.isatty()
    sizes = [file_size(j.path) for j in jobs]
    if n == 1 and n_workers > 1:  # one rank: its parse is split across the cores instead (split_parse.py)
        jobs = [dataclasses.replace(jobs[0], helpers=n_workers)]
    n_workers = max(1, min(n_workers, n, sum(sizes) // MIN_BYTES_PER_WORKER))
    order = sorted(range(n), key=lambda k: -sizes[k])

    def tick(k):
        if show:
            sys.stderr.write(f"\ranalysing traces {k}/{n}")
            sys.stderr.flush()

    out: list = [None] * n
    if n_workers <= 1:
        results = map(run_job, (jobs[k] for k in order))
        for done, (k, res) in enumerate(zip(order, results), 1):
            out[k] = res
            tick(done)
    else:
        done = 0
        try:
            with ProcessPoolExecutor(max_workers=n_workers) as ex:
                for k, res in zip(order, ex.map(run_job, (jobs[k] for k in order), chunksize=1)):
                    out[k] = res
                    done += 1
                    tick(done)
        except BrokenProcessPool:  # a worker was killed (OOM killer, a signal): find which trace, keep the rest
            left = [k for k in order if out[k] is None]
            with ThreadPoolExecutor(max_workers=n_workers) as tp:
                for k, res in zip(left, tp.map(lambda k: _isolated(jobs[k]), left)):
                    out[k] = res
                    done += 1
                    tick(done)
    if show:
        sys.stderr.write("\n")
    return out


def _isolated(job: RankJob) -> RankOutput:
    """`run_job` in a process of its own, so a worker killed by the OOM killer or a signal costs only the
    trace it was analysing: that rank comes back as an error naming the signal, the others as usual."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(job, send), daemon=True)
    p.start()
    send.close()
    try:
        res = recv.recv()
    except (EOFError, OSError):
        res = None
    finally:
        recv.close()
        p.join()
    if isinstance(res, RankOutput):
        return res
    code = p.exitcode
    how = (f"killed by signal {-code} ({signal.Signals(-code).name}{'; the out-of-memory killer?' if -code == 9 else ''})"
           if code is not None and code < 0 and -code in signal.valid_signals() else f"exit status {code}")
    return RankOutput(job.path, None, None, {}, "", "", None,
                      error=f"llmdiag: {job.path}: the worker analysing this trace died ({how}); left out "
                            "(the other ranks are analysed)")


def _child(job: RankJob, conn) -> None:
    try:
        conn.send(run_job(job))
    finally:
        conn.close()
