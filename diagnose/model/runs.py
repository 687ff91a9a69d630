"""The runs one input holds: a folder where the same script was run twice writes two complete sets of ranks.

Grouped by diagnose.metrics.runs from the traces' own evidence; kept in the summary so every output can say
which run it describes and how to analyse the others (`llmdiag analyze PATH --run K`).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field

RUNS_PREFIX = "the input holds "  # the issue that lists the runs starts so (the CLI repeats it on stderr)
OTHER_RUN = "not analysed: run "  # each line on what a run not analysed holds starts so (rules/other_runs.py)
MAX_RUN_ROWS = 64  # runs one summary lists; above, the two oldest, the analysed one and the newest (issue 35)


@dataclass
class RunOutlier:
    """One outlier step of a run (metrics/rank/outlier_ops.py's test), described by the rank where it ran
    longest above its median step, and what that rank's own critical path says grew (rules/other_runs.py)."""

    step: int
    rank: int | None  # the rank it ran longest on (None: a trace with no rank number)
    ranks: int  # ranks where this step is an outlier
    time_ms: float  # the step on that rank
    median_ms: float  # that rank's median step (its steps after the first)
    category: str = ""  # the critical-path category (or breakdown part) that grew the most; "" not read
    grew_ms: float = 0.0  # its growth over the median step's
    held_by: str = ""  # where another rule's one-step record holds most of the excess: "allocator", "runtime"
    # (blocking copies, syncs), "stretch" (one long host op); "" none
    op: str = ""  # the host op that grew the most ("" none), or the stretch's op
    op_grew_ms: float = 0.0
    grown_ops: int = 0  # host ops that each grew ≥ 20 % (spread: the whole host slower)
    of_all: bool = False  # too few steps for the outlier test: the longest step against the median of all steps


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
    # What the run holds, read from its ranks' own metrics in the one parse (rules/other_runs.py): None where no
    # rank of it has a step
    steps: int | None = None  # steps per rank (the median over its ranks)
    first_step: int | None = None
    last_step: int | None = None
    median_step_ms: float | None = None  # median over ranks of each rank's median step after its first
    step_ms: float | None = None  # mean over ranks of each rank's mean step (the headline's basis)
    compute_ms: float | None = None
    exposed_comm_ms: float | None = None
    idle_ms: float | None = None
    outliers: list[RunOutlier] = field(default_factory=list)  # the largest excess first, at most 3
    idle_rank: int | None = None  # the rank idle the most in its median step (two or more numbered ranks)
    idle_rank_ms: float | None = None  # that rank's idle in its median step (the median over its steps)
    idle_median_ms: float | None = None  # the same idle, median over the run's ranks


def run_count(runs: list[RunInfo]) -> int:
    """How many runs the input held. The list ends with the newest run, numbered by its place (1 = the oldest),
    so a list cut to MAX_RUN_ROWS (each of `--run all`'s R summaries listing all R runs made its output quadratic
    in runs) still says how many there were; a list written before the cut is as long as its last number."""
    last = runs[-1].number if runs else 0
    return max(len(runs), last if type(last) is int else 0)


def others_hint(runs: list[RunInfo], most: int = 4) -> str:
    """The largest outlier step of each run not analysed (up to `most` runs), in a few words for a header: the
    line under the issues says what grew, `--run K` analyses it; "" where none has one."""
    from llmdiag.diagnose.model.format import fmt

    parts: list[str] = []
    for r in runs:
        if r.analysed or not r.outliers or len(parts) >= most:
            continue
        o = r.outliers[0]
        size = (f"{fmt(o.time_ms / o.median_ms, 'x')} its median" if o.of_all or not o.median_ms else
                f"+{fmt(o.time_ms - o.median_ms, 'ms')} over its median")
        parts.append(f"run {r.number}'s step {o.step} {size}")
    return "; ".join(parts)
