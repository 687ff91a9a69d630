"""The critical path as a table: what bounds each rank's steps (metrics/rank/critical_path; docs/metrics.md
"Critical path"). The terminal and the report print these same rows: per rank, the path's length per step, its
split into HTA's five categories (percent, summing to 100) and the finer cause holding the most of it. The ranks
whose path is least on the device come first (the ones a faster kernel would not speed up).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.critical_path import TYPICAL_RATIO, RankCriticalPath, TypicalStep
from llmdiag.diagnose.model.format import fmt, plural, ranges

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


TYPICAL_NOTE = (f"Where a rank's steps differ (the longest step's path {TYPICAL_RATIO:g}x the median step's or more), "
                "its mean is weighted by the long step's cause; the typical step is the median-length one.")


def typical_split(t: TypicalStep, ms, pct, key: str) -> str:
    """"typical step #5: 143 ms (compute 60 %, cpu 30 %, ...)": `ms(value, summary path)` and `pct(percent)` format
    the numbers; `key`: the summary path of the typical step ("ranks.0.critical_path.typical.")."""
    parts = sorted(((c, getattr(t, f)) for c, f in CP_COLUMNS if getattr(t, f) > 0), key=lambda x: -x[1])
    return (f"typical step #{t.step}: {ms(t.length_ms, key + 'length_ms')} ms ("
            + ", ".join(f"{c} {pct(x)}" for c, x in parts) + ")")


def typical_rows(a: Analysis, rows: list[CriticalPathRow], ms, pct) -> list[str]:
    """One line per shown rank whose steps differ: its mean (the table's headline) and its typical step's split."""
    out = []
    for x in rows:
        t = x.path.typical
        if t is None:
            continue
        n = sum(1 for s in a.ranks[x.index].steps if s.critical_path is not None) - x.path.steps_left_out
        over = f" over {plural(n, 'step')}" if n > 0 else ""
        key = f"ranks.{x.index}.critical_path."
        out.append(f"Rank {x.rank}: mean {ms(x.path.length_ms, key + 'length_ms')} ms{over}; "
                   + typical_split(t, ms, pct, key + "typical.") + ".")
    return out


def unstated_words(a: Analysis) -> str:
    """One line for the GPU ranks whose path is not stated (RankMetrics.critical_path_note: an event-sampled
    capture), "" where every path is: the terminal and the report print it where the table would say nothing of
    them. Our words and rank numbers only (the note is built from a number, never from trace text)."""
    notes = [(r.rank, r.critical_path_note, r.chores.sampled_share if r.chores else None) for r in a.ranks
             if r.critical_path_note]
    if not notes:
        return ""
    w = min(notes, key=lambda x: (x[2] if x[2] is not None else 1.0, x[0]))
    more = f" (the share is rank {w[0]}'s, the lowest of {plural(len(notes), 'rank')})" if len(notes) > 1 else ""
    return (f"Critical path of rank{'s' if len(notes) > 1 else ''} {ranges([x[0] for x in notes])}: {w[1]}{more}. "
            "The summary holds null for it (ranks[].critical_path, with ranks[].critical_path_note).")


def job_unstated_words(a: Analysis) -> str:
    """The reason the job's path is not stated (Analysis.critical_path_note), "" where it is or none was sought."""
    return f"Job critical path: {a.critical_path_note}." if a.critical_path is None and a.critical_path_note else ""


JOB_NOTE = ("The job's critical path (metrics/job/critical_path.py): per step, back from the rank whose step ends "
            "last along that rank's own path; at each collective it reaches, from the member that arrived last, "
            "back along that member's own work, and so on. The waiting is the part of the path during which the rank "
            "it came from waited at the collective for the rank it runs on (within the five shares, not added to "
            "them). A send and its receive are crossed like a collective of two.")


# A wait is printed where it is above the noise of its own measure or matters to the path: 0.1 ms or 1 % of
# it. A collective's arrival is its kernel's begin, and NCCL kernels begin 90-200 µs after they are ready
# (metrics/rank/critical_path/graph.py, measured on the real traces), with host-device clock skew up to ~50 µs:
# an arrival 0.07 ms after a peer's is not a rank waiting on another. The summary keeps every wait.
WAIT_FLOOR_MS = 0.1
WAIT_FLOOR_SHARE = 0.01


@dataclass
class JobPathView:
    """The job's path in the words the terminal and the report print (ranks as numbers: never a trace string)."""

    length_ms: float
    steps: int
    parts: list[tuple[str, str, float]]  # (column word, field, percent) of HTA's five, largest first, nonzero
    held: list[tuple[int, float]]  # (rank, ms per step of the path on it), the most first
    waiting_pct: float
    waited: list[tuple[int, float]]  # (rank waited on, ms per step), the most first, above the floor (WAIT_FLOOR_*)
    hops: float
    floored: bool = False  # some waits were below the floor: left out of the text
    typical: TypicalStep | None = None  # the median-length step, where the steps differ
    # (rank, ms of the typical step's path on it), the most first, and its index in `critical_path.per_step`
    typical_held: list[tuple[int, float]] = field(default_factory=list)
    typical_index: int = -1


def job_path_view(a: Analysis) -> JobPathView | None:
    """The job's critical path, None where the analysis has none (one rank, CPU traces, nothing matched)."""
    p = a.critical_path
    if p is None:
        return None
    parts = sorted(((c, f, getattr(p, f)) for c, f in CP_COLUMNS if getattr(p, f) > 0), key=lambda x: -x[2])
    every = _ranks(p.waiting_on)
    waited = [(r, x) for r, x in every if x >= WAIT_FLOOR_MS or x >= WAIT_FLOOR_SHARE * p.length_ms]
    at = next((i for i, s in enumerate(p.per_step) if p.typical is not None and s.step == p.typical.step), -1)
    return JobPathView(p.length_ms, p.steps, parts, _ranks(p.held_by), p.waiting_on_rank, waited, p.hops,
                       len(waited) < len(every), p.typical, _ranks(p.per_step[at].held_by) if at >= 0 else [], at)


def _ranks(d: dict[str, float]) -> list[tuple[int, float]]:
    """(rank, ms) of a rank-keyed map, the most first; keys that are not rank numbers (a hand-made summary) left out."""
    out = [(int(k), v) for k, v in d.items() if k.isascii() and k.isdigit() and len(k) < 10]
    return sorted(out, key=lambda x: (-x[1], x[0]))


def job_path_words(v: JobPathView, ms, pct) -> str:
    """One paragraph: `ms(value, summary path)` and `pct(percent)` format the numbers (the terminal's or the
    report's, which tags each value with its path in the summary)."""
    held = ", ".join(f"rank {r} for {ms(x, f'critical_path.held_by.{r}')} ms" for r, x in v.held)
    text = (f"Job critical path ({v.steps} step{'s' if v.steps != 1 else ''}): "
            f"{ms(v.length_ms, 'critical_path.length_ms')} ms per step ("
            + ", ".join(f"{c} {pct(x)}" for c, _, x in v.parts) + f"). Per step it runs on {held}, changing rank "
            f"{v.hops:g} times.")
    if v.typical is not None:
        on = ", ".join(f"rank {r} for {ms(x, f'critical_path.per_step.{v.typical_index}.held_by.{r}')} ms"
                       for r, x in v.typical_held[:3])
        text += (f" That is the mean over {v.steps} steps of unequal length; "
                 + typical_split(v.typical, ms, pct, "critical_path.typical.") + (f", run on {on}" if on else "")
                 + ".")
    if v.waited:
        text += (f" For {pct(v.waiting_pct)} of it, the rank it came from was waiting at a collective for the rank "
                 "it runs on; waited on per step: "
                 + ", ".join(f"rank {r} {ms(x, f'critical_path.waiting_on.{r}')} ms" for r, x in v.waited) + ".")
    elif v.floored:
        text += (" No rank on it waited for another at a collective for 0.1 ms or a hundredth of the path (shorter "
                 "waits are within the kernels' own start and the clocks' skew; the summary keeps them).")
    else:
        text += " No rank on it waited for another at a collective."
    return text


def path_held_words(a: Analysis, ranks) -> str:
    """For the straggler finding: how much of the job's critical path the given ranks hold (metrics/job/
    critical_path.py), "" where there is no job path or none of them holds 1 % of it."""
    p = a.critical_path
    if p is None or not p.length_ms:
        return ""
    held = [(r, ms) for r, ms in _ranks(p.held_by) if r in set(ranks) and ms >= 0.01 * p.length_ms]
    if not held:
        return ""
    return ("the job's critical path runs on " + ", ".join(
        f"rank {r} for {fmt(ms, 'ms')} per step ({100 * ms / p.length_ms:.0f} % of it)" for r, ms in held)
        + " (critical_path.held_by)")
