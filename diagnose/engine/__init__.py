"""Where the per-file jobs run: the local process pool (the default on one machine) or a Dask cluster.

The engine runs any function over jobs that each read one file (`job.path`): it knows nothing of traces or
metrics (`diagnose/analyze.py` hands it the worker's function, `metrics.rank.per_rank.run_job`). Both engines
return the outputs in job order (so the summary does not depend on the engine) and report to the same progress
display; a job whose worker died comes back as `work.failed(job, line)`, the others are kept. The Dask engine
(and dask itself) is imported only when an EngineSpec asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llmdiag.diagnose.engine.pool import run_pool
from llmdiag.diagnose.engine.progress import Progress
from llmdiag.diagnose.engine.work import FileJob, Work, default_workers, failure_line
from llmdiag.diagnose.errors import LlmdiagError

__all__ = ["EngineSpec", "FileJob", "Work", "default_workers", "failure_line", "run_jobs"]


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
    # Work for this process while the local engine's jobs run elsewhere (the command line's next imports): with
    # it, a small input's jobs go to a forked child instead of running here (engine/fork.py).
    meanwhile: Callable[[], object] | None = field(default=None, compare=False)

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


def run_jobs(jobs: list, work: Work, spec: EngineSpec | None = None, *, progress: bool = False,
             console=None) -> list:
    """`work.fn(job)` for every job on the engine `spec` names; outputs in the order of `jobs`. `progress` draws
    files done / total, MB/s and ETA on stderr when it is a terminal (or on `console`, for tests)."""
    from llmdiag.diagnose.io.discover import file_size  # here, not above: loaded where jobs run, not at import

    spec = spec or EngineSpec()
    sizes = [file_size(j.path) for j in jobs]
    with Progress(len(jobs), sum(sizes), enabled=progress, console=console) as bar:
        if spec.is_dask:
            from llmdiag.diagnose.engine.dask_engine import run_dask

            return run_dask(jobs, sizes, spec, work, bar)
        return run_pool(jobs, sizes, spec.jobs or default_workers(), work, bar, spec.meanwhile)
