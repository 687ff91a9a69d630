"""Where the per-rank jobs run: the local process pool (the default on one machine) or a Dask cluster.

Both take the same RankJobs, return the RankOutputs in job order (so the summary does not depend on the engine)
and report to the same progress display; a trace whose worker died comes back as a named error, the others
are kept. The Dask engine (and dask itself) is imported only when an EngineSpec asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from diagnose.engine.pool import run_pool
from diagnose.engine.progress import Progress
from diagnose.errors import LlmdiagError
from diagnose.io.loader import file_size
from diagnose.metrics.per_rank import RankJob, RankOutput, default_jobs, run_job


@dataclass(frozen=True)
class EngineSpec:
    """The engine of one analysis. At most one of the Dask fields is set; none: the local pool of `jobs`
    processes (all cores by default). `dask_local`: a LocalCluster of that many worker processes, started and
    closed by llmdiag; `scheduler`: the address of a running scheduler (tcp://host:8786); `scheduler_file`: the
    JSON file a scheduler wrote (`dask scheduler --scheduler-file`)."""

    jobs: int | None = None
    dask_local: int | None = None
    scheduler: str | None = None
    scheduler_file: str | None = None

    def __post_init__(self):
        given = [f for f, v in (("--dask-local", self.dask_local), ("--scheduler", self.scheduler),
                                ("--scheduler-file", self.scheduler_file)) if v]
        if len(given) > 1:
            raise LlmdiagError(f"{' and '.join(given)} each choose the Dask cluster: give one of them")
        if given and self.jobs:
            raise LlmdiagError(f"--jobs sizes the local process pool, not {given[0]}'s Dask cluster: drop one of them")
        if self.dask_local is not None and self.dask_local < 1:
            raise LlmdiagError(f"--dask-local needs at least 1 worker, not {self.dask_local}")

    @property
    def is_dask(self) -> bool:
        return bool(self.dask_local or self.scheduler or self.scheduler_file)


def run_jobs(jobs: list[RankJob], spec: EngineSpec | None = None, *, progress: bool = False,
             fn: Callable[[RankJob], RankOutput] = run_job, console=None) -> list[RankOutput]:
    """`fn(job)` for every job on the engine `spec` names; outputs in the order of `jobs`. `progress` draws
    files done / total, MB/s and ETA on stderr when it is a terminal (or on `console`, for tests)."""
    spec = spec or EngineSpec()
    sizes = [file_size(j.path) for j in jobs]
    with Progress(len(jobs), sum(sizes), enabled=progress, console=console) as bar:
        if spec.is_dask:
            from diagnose.engine.dask_engine import run_dask

            return run_dask(jobs, sizes, spec, fn, bar)
        return run_pool(jobs, sizes, spec.jobs or default_jobs(), fn, bar)
