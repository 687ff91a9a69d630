"""The runs one input holds: a folder where the same script was run twice writes two complete sets of ranks.

Grouped by diagnose.metrics.runs from the traces' own evidence; kept in the summary so every output can say
which run it describes and how to analyse the others (`llmdiag analyze PATH --run K`).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field

RUNS_PREFIX = "the input holds "  # the issue that lists the runs starts so (the CLI repeats it on stderr)
MAX_RUN_ROWS = 64  # runs one summary lists; above, the two oldest, the analysed one and the newest (issue 35)


@dataclass
class RunInfo:
    number: int  # 1 = the oldest; `--run K` picks run K
    files: int  # trace files of this run (unreadable ones placed by their file-name time included)
    ranks: list[int] = field(default_factory=list)  # rank numbers its traces claim
    world_size: int | None = None
    start: str = ""  # wall-clock start of its capture, "2023-11-02 20:59:27 UTC"; "" unknown
    start_us: float | None = None  # the same, epoch µs
    end_us: float | None = None
    pids: list[int] = field(default_factory=list)  # process ids in Kineto file names (host_PID.TIME.pt.trace.json)
    analysed: bool = False  # this analysis describes this run


def run_count(runs: list[RunInfo]) -> int:
    """How many runs the input held. The list ends with the newest run, numbered by its place (1 = the oldest),
    so a list cut to MAX_RUN_ROWS (each of `--run all`'s R summaries listing all R runs made its output quadratic
    in runs) still says how many there were; a list written before the cut is as long as its last number."""
    last = runs[-1].number if runs else 0
    return max(len(runs), last if type(last) is int else 0)
