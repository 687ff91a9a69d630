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
    grown: int = 0  # (thread, op) pairs whose time grew by at least SPREAD_MS and SPREAD_SHARE of theirs
    ops: list[OpGrowth] = field(default_factory=list)  # the most grown first (at most TOP)
    threads: list[ThreadGrowth] = field(default_factory=list)  # threads whose op time grew, the most first
