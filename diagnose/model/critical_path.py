"""What bounds a step: the critical path's length and its split, in HTA's five categories and our finer causes.

Shares are percent of the path's length. HTA's categories (`cpu_bound`, `gpu_compute_bound`,
`gpu_communication_bound`, `gpu_kernel_launch_overhead`, `gpu_kernel_kernel_overhead`) sum to 100; every finer
cause in `causes` sums into one of them (metrics/rank/critical_path/split.py says which).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field

MAX_WAITED = 5  # ranks named in JobCriticalPath.waiting_on and held_by, and in each step's (JobStepPath)
# Why a GPU rank's (or the job's) path is not stated: an event-sampled capture (metrics/rank/idle_stretch.py
# SAMPLED_SHARE) drops most host ops, launches, kernels and every synchronize, so the chain that made the step's
# time is not in the events; a path walked over what is left would name the wrong bound with full confidence.
SAMPLED_WORDS = ("not determined: event-sampled capture ({pct} of host ops followed by the next op's External id; "
                 "a complete capture: 98-100 %): most host and device events are missing, so what bounds the step "
                 "cannot be read; capture without sampling to see it")


def sampled_note(share: float) -> str:
    """The reason `critical_path` is null on an event-sampled rank (RankMetrics.critical_path_note)."""
    return SAMPLED_WORDS.format(pct=f"{100 * share:.0f} %")


def job_sampled_note(sampled: list[int], ranks: int, share: float) -> str:
    """The reason the job's `critical_path` is null where any of its ranks is event-sampled: the path crosses
    ranks at collectives, so a sampled rank's missing events would misplace every crossing (Analysis.
    critical_path_note). `share`: the lowest of those ranks' consecutive shares."""
    who = ("every rank's capture is" if len(sampled) == ranks else f"rank {sampled[0]}'s capture is"
           if len(sampled) == 1 else f"{len(sampled)} of the {ranks} ranks' captures are")
    return (f"not determined: {who} event-sampled "
            f"({'as low as ' if len(sampled) > 1 else ''}{100 * share:.0f} % of host ops followed by the next op's "
            "External id; a complete capture: "
            "98-100 %): the job's path crosses ranks at collectives, and where a rank's events are missing its "
            "arrivals and its own path cannot be read; capture without sampling to see what bounds the job's step")


CATEGORIES = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_kernel_launch_overhead",
              "gpu_kernel_kernel_overhead")


@dataclass
class CriticalPath:
    """The critical path of one step (or of a rank's steps together): length and shares in percent."""

    length_ms: float  # per step (a rank's: the mean over its steps)
    cpu_bound: float
    gpu_compute_bound: float
    gpu_communication_bound: float
    gpu_kernel_launch_overhead: float
    gpu_kernel_kernel_overhead: float

    def shares(self) -> dict[str, float]:
        """HTA's five categories, in percent."""
        return {c: getattr(self, c) for c in CATEGORIES}


# A step's path this many times the median step's: the steps differ materially, and the mean's split (weighted by
# length: a one-off long step's cause swamps it) is not what bounds most steps; the typical step's is stated too.
TYPICAL_RATIO = 1.5
TYPICAL_MIN_STEPS = 3  # of two steps, neither is the typical one


@dataclass
class TypicalStep(CriticalPath):
    """The path of the median-length step (the lower of the two middle ones in an even count), stated beside the
    mean where the steps differ materially (typical_step)."""

    step: int = 0  # the step number (ProfilerStep#N)


def typical_step(steps: list[tuple[int, CriticalPath]], skip_first: bool = False) -> TypicalStep | None:
    """The typical step of (step number, path) pairs, the steps the mean is over: None with fewer than
    TYPICAL_MIN_STEPS, or where the longest path is under TYPICAL_RATIO × the median step's. The one place the
    rank's and the job's typical step are chosen. `skip_first`: the first step is no candidate (the job's first
    step starts at its ranks' earliest start, not at a previous step's end, so its length carries the ranks'
    start offsets: torchrec qcomm's #4, 191 ms against 143-149 ms on every rank)."""
    if len(steps) < TYPICAL_MIN_STEPS:
        return None
    ordered = sorted(steps[1:] if skip_first else steps, key=lambda x: (x[1].length_ms, x[0]))
    step, mid = ordered[(len(ordered) - 1) // 2]
    if mid.length_ms <= 0 or max(x[1].length_ms for x in steps) < TYPICAL_RATIO * mid.length_ms:
        return None
    return TypicalStep(length_ms=mid.length_ms, step=step, **{c: getattr(mid, c) for c in CATEGORIES})


@dataclass
class RankCriticalPath(CriticalPath):
    """A rank's steps together, with the finer causes (kept per rank only: per step they would double a
    16,384-rank summary)."""

    causes: dict[str, float] = field(default_factory=dict)  # finer causes, percent of the length
    steps_left_out: int = 0  # steps not in the mean: no whole iteration (critical_path/path.py whole_iterations)
    typical: TypicalStep | None = None  # the median-length step's path, where the steps differ (typical_step)


@dataclass
class JobStepPath(CriticalPath):
    """One step of the job's path (JobCriticalPath walks each step once; these are its parts, not a second walk).
    The five shares sum to 100; `waiting_on_rank` overlays them. At most MAX_WAITED ranks in each map, whatever
    the job's size: the summary gains steps × 2 × MAX_WAITED numbers, never a rank × step table."""

    step: int = 0  # the step number (ProfilerStep#N)
    waiting_on_rank: float = 0.0
    waiting_on: dict[str, float] = field(default_factory=dict)  # rank waited on -> ms in this step, the most first
    held_by: dict[str, float] = field(default_factory=dict)  # rank -> ms of this step's path on it, the most first
    hops: int = 0  # changes of rank in this step


@dataclass
class JobCriticalPath(CriticalPath):
    """The job's critical path through its collectives (metrics/job/critical_path.py): per step, back from the
    rank whose step ends last, leaving a rank at each matched collective for the member that arrived last. The
    five shares sum to 100 (the path tiles the step); `waiting_on_rank` overlays them: the part of the path run
    on a rank's own work while the rank the path came from waited for it at their collective."""

    waiting_on_rank: float = 0.0  # percent of the length (within the five shares, not added to them)
    waiting_on: dict[str, float] = field(default_factory=dict)  # rank waited on -> ms per step, the most first
    # (at most MAX_WAITED ranks)
    held_by: dict[str, float] = field(default_factory=dict)  # rank -> ms per step of the path on that rank's own
    # work and communication, the most first (at most MAX_WAITED ranks)
    steps: int = 0  # steps walked
    hops: float = 0.0  # changes of rank per step (mean)
    per_step: list[JobStepPath] = field(default_factory=list)  # each step walked, in step order
    typical: TypicalStep | None = None  # the median-length step of per_step, where the steps differ (typical_step)

    def shares(self) -> dict[str, float]:
        """HTA's five categories and the wait on other ranks (an overlay of the five), in percent."""
        return {**super().shares(), "waiting_on_rank": self.waiting_on_rank}


