"""The host ops of a rank's outlier steps against its typical step (metrics/rank/outlier_ops.py).

A step far longer than the others has a cause the per-step critical path places in a category (host, compute,
communication, launches); where that category is the host, which op on which thread took the extra time is only
in the events, so it is read there, once per outlier step, and kept here for rules/outlier_steps.py. Times are ms
in the outlier step and the median over the capture's other steps after its first (absent: 0).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class OpGrowth:
    """One (thread, top-level host op name) whose time in the outlier step is above its typical step's."""

    thread: str  # the thread's name (or its id); "" with op "": the step's time with no host op on any thread
    op: str  # the op name
    ms: float  # in the outlier step, summed over the op's calls
    median_ms: float  # median over the typical steps
    child: str = ""  # the op directly under it whose time grew the most ("" none)
    child_ms: float = 0.0
    child_median_ms: float = 0.0


@dataclass
class ThreadGrowth:
    """A host thread's top-level op time in the outlier step against its typical step's."""

    thread: str
    ms: float
    median_ms: float


@dataclass
class OutlierStepOps:
    """One outlier step of a rank: its device span and the typical step's, and its host ops that grew most."""

    step: int
    time_ms: float  # the step's span (StepBreakdown.time_ms)
    median_ms: float  # median span of the rank's steps after its first
    host_ms: float  # top-level host op time in the step, all threads
    host_median_ms: float  # the same, median over the typical steps
    runtime_idle_ms: float = 0.0  # device idle inside runtime API calls in the step (blocking copies, syncs, mallocs)
    runtime_idle_median_ms: float = 0.0  # the same, median over the typical steps
    grown: int = 0  # (thread, op) pairs whose time grew by at least SPREAD_MS and SPREAD_SHARE of theirs
    ops: list[OpGrowth] = field(default_factory=list)  # the most grown first (at most TOP)
    threads: list[ThreadGrowth] = field(default_factory=list)  # threads whose op time grew, the most first


@dataclass
class CollectiveRepeat:
    """A host-side collective (gloo) called once per iteration whose one call took far longer than its repeats
    (metrics/rank/collective_repeats.py): read where the capture's steps cannot tell an outlier (too few
    ProfilerSteps, or one covering a part of the capture), each repeat standing for one iteration."""

    name: str  # `gloo:all_reduce`
    thread: str
    shape: str  # its Input Dims as text ("" none)
    calls: int  # calls of this (thread, name, shape) in the capture
    index: int  # which call is the outlier (1 = the first)
    start_ms: float  # its start, from the capture's first event
    ms: float  # its duration
    median_ms: float  # the median duration of the calls after the first
    period_ms: float | None = None  # its start to the next call's start (its iteration); None for the last call
    median_period_ms: float | None = None  # the median of those periods over the calls after the first
    in_steps: bool = False  # it starts inside an analysis window (a ProfilerStep)
    with_it: int = 0  # other such collectives (other threads or shapes) whose outlier call overlaps this one
