"""What the engine runs, named without any metric: a function over jobs that each read one file."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class FileJob(Protocol):
    """A job the engine can place: it reads one file (sized for the schedule, named when its worker dies)."""

    path: str


@dataclass(frozen=True)
class Work:
    """What the engine runs. `fn(job)` runs on a worker (picklable: a module-level function) and never raises
    for bad input; `failed(job, line)` is the output of a job whose worker died, `line` naming the file and why;
    `out` is the type `fn` returns (a Dask worker of another version may return something else: then failed)."""

    fn: Callable[[Any], Any]
    failed: Callable[[Any, str], Any]
    out: type


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def failure_line(job: FileJob, why: str) -> str:
    return f"llmdiag: {job.path}: {why}; left out (the other ranks are analysed)"
