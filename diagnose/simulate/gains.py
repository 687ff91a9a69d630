"""Gains the findings take from the what-if replay (diagnose.simulate.whatif), in one place.

`straggler_of`: the worker whose ideal (its ops at their op type's typical duration, everything else as
measured) shortens the simulated step most, if that is at least STRAGGLER_SHARE of it: "if rank R ran at its
peers' speed: step X ms". An estimate (a replay of the dependency graph), not a bound.
"""

from __future__ import annotations

from diagnose.model.whatif import WhatIf, WorkerGain

# 1 % of the step: on the planted corpus (tests/gen_planted.py) the silent twins, whose actions vary by ±2-4 %,
# reach at most 0.4 %; the weakest plant (one stage's forward ×1.25) gains 2 %. The ST job's worst worker
# gains 0.5 %: its slowdown is the stage split (M_S), not a worker (M_W 3 %), as the study says.
STRAGGLER_SHARE = 0.01


def straggler_of(w: WhatIf | None) -> WorkerGain | None:
    if w is None or w.missing or not w.worker_gains or not w.no_delay_step_ms:
        return None
    g = w.worker_gains[0]
    return g if g.gain_ms >= STRAGGLER_SHARE * w.no_delay_step_ms else None


def straggler_gain(w: WhatIf | None, rank: int) -> WorkerGain | None:
    """The replayed gain of making `rank` ideal, where the replay has it (None: not simulated)."""
    if w is None or w.missing:
        return None
    return next((g for g in w.worker_gains if g.rank == rank), None)
