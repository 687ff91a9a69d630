"""What moving one transformer layer from the slowest pipeline stage to its lighter neighbour would buy: an
estimate that assumes every layer of a stage costs the same (the stage's F and B cost / its layers; the
first and last stages' embedding and loss are counted in their layers), replayed with the run's cost model
(diagnose.simulate.predict) in the run's own schedule.

Layers per stage come from the manifest of llmdiag's own runs: `model.layers` split contiguously over
`pipeline.stages`, the first `layers mod stages` stages one extra (workloads/grammar.py `layers_of`). Traces
without a manifest get no estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdiag.diagnose.simulate.predict import CostModel


@dataclass
class LayerMove:
    src: int  # the slowest stage
    dst: int  # its lighter neighbour
    step_ms: float  # replayed step with the layer moved
    gain_ms: float  # replayed step as is − step_ms (estimate)


def stage_layers(manifest) -> list[int] | None:
    """Layers per stage of an llmdiag run (None for other runs, or a layout the split does not describe)."""
    pc = getattr(manifest, "pipeline", None) if manifest is not None else None
    model = getattr(manifest, "model", None) if manifest is not None else None
    layers = model.get("layers") if isinstance(model, dict) else None
    if pc is None or not isinstance(layers, int) or not pc.stages or (pc.stages_per_rank or 1) != 1:
        return None
    base, extra = divmod(layers, pc.stages)
    return [base + (1 if s < extra else 0) for s in range(pc.stages)]


def move_one_layer(model: CostModel, predict, schedule: str, p: int, m: int, layers: list[int]) -> LayerMove | None:
    """Replay the schedule as run and with one layer moved; None where no stage can give one (a single layer)
    or the schedule is not simulated. `predict` is diagnose.simulate.replay.predict (passed in: replay imports
    this module)."""
    cost, links = model.durations(m, m)
    per_stage = {s: cost.get((s, "F"), 0.0) + cost.get((s, "B"), 0.0) for s in range(p)}
    if len(layers) != p or p < 2:
        return None
    src = max(range(p), key=lambda s: (per_stage[s], -s))
    if layers[src] < 2:
        return None
    dst = min((s for s in (src - 1, src + 1) if 0 <= s < p), key=lambda s: (per_stage[s], s))
    moved = dict(cost)
    for kind in ("F", "B"):
        one = cost.get((src, kind), 0.0) / layers[src]
        moved[(src, kind)] = cost.get((src, kind), 0.0) - one
        moved[(dst, kind)] = cost.get((dst, kind), 0.0) + one
    now = predict(schedule, p, m, cost, link_ms=links, spread=model.spread)
    after = predict(schedule, p, m, moved, link_ms=links, spread=model.spread)
    if now is None or after is None:
        return None
    return LayerMove(src, dst, after.makespan, now.makespan - after.makespan)
