"""The critical path as a table: what bounds each rank's steps (metrics/rank/critical_path; docs/metrics.md
"Critical path"). The terminal and the report print these same rows: per rank, the path's length per step, its
split into HTA's five categories (percent, summing to 100) and the finer cause holding the most of it. The ranks
whose path is least on the device come first (the ones a faster kernel would not speed up).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.critical_path import RankCriticalPath

TERMINAL_ROWS = 8  # the terminal's share of its rank rows (the report shows more): the least device-bound ranks
# (column, field): HTA's categories in its order
CP_COLUMNS = (("cpu", "cpu_bound"), ("compute", "gpu_compute_bound"), ("comm", "gpu_communication_bound"),
              ("launch", "gpu_kernel_launch_overhead"), ("kernel-kernel", "gpu_kernel_kernel_overhead"))
CP_HEADER = ["rank", "path ms", *(c for c, _ in CP_COLUMNS), "largest cause"]
CP_NOTE = ("The critical path of each step: the chain of dependencies (host thread order, launches, stream order, "
           "stream-event waits, synchronizations) that made its time, split by what each link waited on, in % of the "
           "path: host (cpu), compute kernels and copies, communication kernels, launch delay, gaps between device "
           "ops. HTA's categories; `largest cause` is the finer cause holding most of the path.")
CAUSE_WORDS = {"host_op": "host ops", "host_gap": "unprofiled host gap", "runtime": "runtime calls",
               "allocator": "allocator", "synchronize": "synchronize", "compute": "compute kernels",
               "memcpy": "memcpy", "memset": "memset", "communication": "communication", "launch_delay": "launch delay",
               "kernel_gap": "kernel-kernel gap", "event_wait": "stream-event wait"}


@dataclass
class CriticalPathRow:
    index: int  # position in Analysis.ranks (the summary path `ranks.<index>.critical_path.<field>`)
    rank: int
    path: RankCriticalPath
    top_cause: str  # in words, "" none
    top_share: float | None


def critical_path_rows(a: Analysis, limit: int | None = None) -> tuple[list[CriticalPathRow], int]:
    """(rows of the ranks with a critical path, least device-bound first, at most `limit`; how many have one)."""
    rows = []
    for i, r in enumerate(a.ranks):
        p = r.critical_path
        if p is None:
            continue
        top = max(p.causes.items(), key=lambda kv: kv[1], default=None)
        rows.append(CriticalPathRow(i, r.rank, p, CAUSE_WORDS.get(top[0], top[0]) if top and top[1] > 0 else "",
                                    top[1] if top and top[1] > 0 else None))
    rows.sort(key=lambda x: (x.path.gpu_compute_bound + x.path.gpu_communication_bound, x.rank))
    return rows[:limit] if limit is not None else rows, len(rows)
