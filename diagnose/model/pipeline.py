"""The pipeline section of an Analysis: per-stage bubbles against theory and the replay, and the predictions
at other schedules and microbatch counts (diagnose.metrics.pipeline, diagnose.simulate)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class StageBubble:
    stage: int
    rank: int
    busy_ms: float  # |U(F/B/I/W spans of the stage)| per step
    measured: float  # 1 − busy / pipeline window
    replay: float | None  # same, in the zero-communication replay of the observed order
    theory: float  # closed formula for the schedule
    gap: float  # measured − theory


@dataclass
class PipelinePrediction:
    schedule: str
    microbatches: int
    bubble: float | None  # replayed (mean over stages); None where the schedule is not simulated (interleaved,
    # zero-bubble: only `theory` is known)
    step_ms: float | None  # replayed pipeline window; None for formula-only rows
    theory: float
    busy_ms: float | None = None  # the cost model's busiest stage's action time per step at this setting (every
    # row where a model was fitted, simulated or not: how the work grows with m)


@dataclass
class PipelineResult:
    schedule: str
    stages: int  # pipeline ranks p
    stages_per_rank: int  # v
    microbatches: int
    window_ms: float  # measured pipeline window per step (mean)
    replay_window_ms: float | None
    stage_bubbles: list[StageBubble]
    measured: float  # mean over stages
    replay: float | None
    theory: float
    imbalance: float | None  # slowest stage busy / mean stage busy − 1
    explanation: str  # why measured, replay and theory differ, in words
    predictions: list[PipelinePrediction] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)  # ranks of each pipeline replica, in stage order
    inferred: bool = False  # stages, microbatches, F/B and schedule read from send/recv, no PP: labels
    inference_note: str = ""  # how, where inferred, in words: the explanation's first sentences
    prediction_model: str = ""  # what the predictions' cost model fitted from the run (diagnose.simulate.predict)
    prediction_error: float | None = None  # prediction at the run's own schedule and m / measured window − 1
    # moving one layer from the slowest stage to its lighter neighbour (diagnose.simulate.layers): estimate
    layer_move: dict | None = None  # {"src", "dst", "step_ms", "gain_ms"}
