"""How much of each host phase an event-sampled capture recorded (metrics/rank/phase_cover.py): per top-level user
annotation inside the steps (`## forward ##`, `## backward ##`, `Optimizer.step#...`), its span per step and the
part of it some recorded host op or runtime call (any thread) covers. A phase the sample left mostly bare cannot be
analysed from it (rules/capture.py says which). Recorded only on event-sampled ranks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PhaseCover:
    name: str  # the annotation (120 characters)
    span_ms: float  # its span per step (summed over its instances in the windows)
    covered_ms: float  # of it, per step, under some recorded host op or runtime call on any thread
