"""The what-if simulation's result (diagnose.simulate): the job as traced, simulated, against its ideal.

S (`slowdown`) is the mean simulated step of the job with its measured durations (launch delays removed)
over the mean simulated step of the ideal job, where every op takes the typical duration of its op type
(compute: the mean, communication transfer: the median, over all workers and steps). A contribution is S
recomputed with one group of ops (an op type, a stage, a DP rank) restored to its measured durations and
every other op ideal. docs/simulation.md defines each number.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class Contribution:
    """S with only this group's ops at their measured durations (1.0: the group costs nothing)."""

    group: str  # "optype", "stage", "dp_rank"
    key: str  # the op type, stage or DP rank
    slowdown: float


@dataclass
class StageLoad:
    """One pipeline stage of the traced job, per step (means over steps and DP ranks)."""

    stage: int
    compute_ms: float  # |U(forward/backward compute)| of a worker of the stage
    bubble: float  # 1 − compute / pipeline window (first compute start to last compute end of the step)


@dataclass
class WorkerGain:
    """The job as traced with one worker's ops at their ideal durations: "if rank R ran at its peers' speed"."""

    rank: int
    step_ms: float  # simulated step (launch delays removed) with this worker ideal, everything else measured
    gain_ms: float  # no_delay_step_ms − step_ms: an estimate from the replay, not a bound
    optype: str  # the op type of this worker whose ideal alone gains most
    optype_gain_ms: float


@dataclass
class WhatIf:
    source: str  # "megatron-ops" (the OSDI'25 artifact's op table) or "kineto-pipeline"
    workers: int
    steps: int
    ops: int  # ops in the dependency graph
    missing: list[str] = field(default_factory=list)  # why no answer is given: nothing below is then set
    assumed: list[str] = field(default_factory=list)  # what the graph assumes where the trace is silent
    left_out: list[str] = field(default_factory=list)  # replays not run (a job too large for the replay budget)
    measured_step_ms: float | None = None  # mean over steps: first op start to last op end, as traced
    simulated_step_ms: float | None = None  # the graph replayed with measured durations and launch delays
    sim_error: float | None = None  # simulated / measured − 1
    no_delay_step_ms: float | None = None  # measured durations, launch delays removed
    ideal_step_ms: float | None = None  # every op at its op type's typical duration
    slowdown: float | None = None  # S = no_delay_step / ideal_step
    launch_slowdown: float | None = None  # measured step / no_delay_step
    per_step: dict[str, float] = field(default_factory=dict)  # step -> S of that step
    contributions: list[Contribution] = field(default_factory=list)  # by op type, stage and DP rank
    ms: float | None = None  # M_S: share of the slowdown removed by making the last stage ideal
    mw: float | None = None  # M_W: share removed by making the worst ~3 % of workers ideal
    mw_ranks: list[int] = field(default_factory=list)  # the workers M_W made ideal
    worker_gains: list[WorkerGain] = field(default_factory=list)  # the likeliest stragglers, largest gain first
    stage_gains: dict[str, float] = field(default_factory=dict)  # stage -> ms saved with its ops ideal (estimate)
    stages: list[StageLoad] = field(default_factory=list)
    imbalance: float | None = None  # slowest stage's compute / mean stage compute − 1
    ideal: str = ""  # the ideal, in words
    # what the "dp_rank" group's keys are in this job's resolved layout: "DP rank" (the artifact's), "TP rank" where
    # the ranks of a stage differ only in tp (a tp4pp2 run), "ranks at" for several dims (keys "dp1 tp0"), "rank
    # in stage" where the layout is unknown (the key: its place among its stage's ranks)
    position: str = "DP rank"
    # "a-b" (the ranks of one point-to-point link, both directions) -> ms saved with that link's transfers at
    # their op type's median, everything else as traced (estimate)
    link_gains: dict[str, float] = field(default_factory=dict)

    def top(self, n: int = 3) -> list[Contribution]:
        """The n groups whose measured durations cost most, over every grouping."""
        return sorted(self.contributions, key=lambda c: -c.slowdown)[:n]

    def by(self, group: str) -> list[Contribution]:
        return [c for c in self.contributions if c.group == group]
