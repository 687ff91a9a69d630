"""The five parts a step's time splits into (metrics/rank/overlap.py: they sum to the step), with the words and
colour every figure draws them in: the per-rank breakdown bars and the per-step chart read this one table, so
a part has one name and one colour in the whole report.
"""

from __future__ import annotations

from typing import NamedTuple


class StepPart(NamedTuple):
    key: str  # attribute of RankMetrics and StepBreakdown (ms)
    label: str
    colour: str


STEP_PARTS = (
    StepPart("compute_only_ms", "compute only", "#4c78a8"),
    StepPart("overlapped_comm_ms", "overlapped comm", "#72b7b2"),
    StepPart("exposed_comm_ms", "exposed comm", "#e45756"),
    StepPart("other_ms", "other (memcpy/memset)", "#b279a2"),
    StepPart("idle_ms", "idle", "#c7c7c7"),  # grey a shade darker than the card, so a thin idle part still shows
)
