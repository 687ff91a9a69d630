"""The idle breakdown as a table: where each rank's device idle went, per cause (issue 28 item 8).

Computed once per rank by metrics/rank/idle.py (`ranks[].idle`); until now it showed only inside one finding's
evidence. The terminal and the report print these same rows: per rank (idle is the device's, across all its
streams), ms per step, the causes in their order of precedence, which sum to the idle, and the blocking call
holding the most of it. The ranks with the most idle come first.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.idle import IdleBreakdown

# (column, IdleBreakdown field): the causes in precedence order; together they are `idle_ms`.
IDLE_COLUMNS = (("edge", "edge_ms"), ("queued", "queued_ms"), ("runtime", "runtime_ms"),
                ("data loader", "dataloader_ms"), ("comm wait", "comm_wait_ms"), ("host", "host_bound_ms"),
                ("unattributed", "unattributed_ms"))
IDLE_HEADER = ["rank", "idle", *(c for c, _ in IDLE_COLUMNS), "top blocking call"]
IDLE_NOTE = ("Device idle per step, each nanosecond under the first cause that explains it: capture edge, queued "
             "work (the next kernel was launched before the gap: a dependency, not the host), blocking runtime calls "
             "and host syncs (malloc/free, synchronize, synchronous copies, `.item()`), the DataLoader, "
             "communication waits, other host ops (host-bound), nothing seen. The parts sum to the idle.")


@dataclass
class IdleRow:
    index: int  # position in Analysis.ranks (the summary path `ranks.<index>.idle.<field>`)
    rank: int
    idle: IdleBreakdown
    top_call: str  # the blocking call or host sync op holding the most idle, "" none
    top_ms: float | None


def idle_rows(a: Analysis, limit: int | None = None) -> tuple[list[IdleRow], int]:
    """(rows of the ranks with an idle split, most idle first, at most `limit`; how many ranks have one)."""
    rows = []
    for i, r in enumerate(a.ranks):
        d = r.idle
        if d is None:
            continue
        top = max(d.runtime_ops.items(), key=lambda kv: (kv[1], kv[0]), default=("", None))
        rows.append(IdleRow(i, r.rank, d, top[0][:200], top[1]))
    rows.sort(key=lambda x: (-x.idle.idle_ms, x.rank))
    return (rows[:limit] if limit is not None else rows), len(rows)
