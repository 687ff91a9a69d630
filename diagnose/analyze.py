"""`analyze`: a run folder or trace folder in, the typed Analysis (with its findings) out.

The stages in order: discover the files (io), parse each rank in a worker process (metrics.per_rank; only
summaries come back), assemble the ranks (metrics.cross_rank), then run the rules.
"""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor

from diagnose import __version__
from diagnose.io.discover import discover
from diagnose.io.loader import file_size
from diagnose.metrics.cross_rank import assemble, stage_hint
from diagnose.metrics.per_rank import RankJob, RankOutput, default_jobs, run_job
from diagnose.model.analysis import Analysis, AnalysisOptions
from diagnose.model.summary import manifest_from_dict


def analyze_path(path, *, comm_regex: str | None = None, exclude_last_step: bool = False, jobs: int | None = None,
                 progress: bool = False, top_k: int = 20, rules: bool = True) -> Analysis:
    src = discover(path)
    man = manifest_from_dict(src.manifest, src.path) if src.manifest is not None else None
    cpu_cap = man.device.memory_bytes if man and man.device and man.device.type == "cpu" else None
    job_list = [RankJob(f, comm_regex, exclude_last_step, stage_hint(man, f), cpu_cap, top_k) for f in src.files]
    outputs = _run_all(job_list, jobs or default_jobs(), progress)
    opts = AnalysisOptions(comm_regex=comm_regex, exclude_last_step=exclude_last_step, files=len(src.files),
                           run_folder=bool(src.run_folder))
    analysis = assemble(outputs, man, source=src.path, name=src.name, skipped=src.skipped, opts=opts,
                        version=__version__)
    if rules:
        from diagnose.rules import findings

        analysis.findings = findings(analysis)
    return analysis


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
        with ProcessPoolExecutor(max_workers=n_workers) as ex:
            for done, (k, res) in enumerate(zip(order, ex.map(run_job, (jobs[k] for k in order), chunksize=1)), 1):
                out[k] = res
                tick(done)
    if show:
        sys.stderr.write("\n")
    return out
