"""Gains the findings take from the what-if replay (diagnose.simulate.whatif), in one place.

`straggler_of`: the worker whose ideal (its ops at their op type's typical duration, everything else as
measured) shortens the simulated step most, if that is at least STRAGGLER_SHARE of it: "if rank R ran at its
peers' speed: step X ms". An estimate (a replay of the dependency graph), not a bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.whatif import WhatIf, WorkerGain

# 1 % of the step: on the planted corpus (tests/gen/planted.py) the silent twins, whose actions vary by ±2-4 %,
# reach at most 0.4 %; the weakest plant (one stage's forward ×1.25) gains 2 %. The ST job's worst worker
# gains 0.5 %: its slowdown is the stage split (M_S), not a worker (M_W 3 %), as the study says.
STRAGGLER_SHARE = 0.01


def straggler_of(w: WhatIf | None) -> WorkerGain | None:
    if w is None or w.missing or not w.worker_gains or not w.no_delay_step_ms:
        return None
    g = w.worker_gains[0]
    return g if g.gain_ms >= STRAGGLER_SHARE * w.no_delay_step_ms else None


PP_COMM = ("forward-pp-comm", "backward-pp-comm")


@dataclass
class Attribution:
    """What the replay blames: a worker (rank, its costliest op type) or a point-to-point link ("a-b")."""

    gain_ms: float
    rank: int | None = None
    optype: str | None = None
    link: str | None = None


def slow_link_of(w: WhatIf | None) -> tuple[str, float] | None:
    """The link whose transfers at their op type's median shorten the step most, if by STRAGGLER_SHARE."""
    if w is None or w.missing or not w.link_gains or not w.no_delay_step_ms:
        return None
    link, gain = max(w.link_gains.items(), key=lambda kv: (kv[1], kv[0]))
    return (link, gain) if gain >= STRAGGLER_SHARE * w.no_delay_step_ms else None


def attribution(w: WhatIf | None) -> Attribution | None:
    """The worker `straggler_of` names, unless its costliest op type is point-to-point communication and a
    link gains at least STRAGGLER_SHARE: then the link (a slow link makes both its ends look slow, through
    the transfers they share; a slow worker's links transfer at the usual speed and gain nothing)."""
    g, link = straggler_of(w), slow_link_of(w)
    if link and (g is None or g.optype in PP_COMM):
        return Attribution(link[1], link=link[0])
    return Attribution(g.gain_ms, g.rank, g.optype) if g else None


def straggler_gain(w: WhatIf | None, rank: int) -> WorkerGain | None:
    """The replayed gain of making `rank` ideal, where the replay has it (None: not simulated)."""
    if w is None or w.missing:
        return None
    return next((g for g in w.worker_gains if g.rank == rank), None)


def simulated_straggler_gain(w: WhatIf | None, ranks, step_ms: float | None) -> tuple[float, str] | None:
    """(gain ms, how) for the straggler among `ranks` whose ideal gains most in the replay; None where the
    replay has none of them (a job without a dependency graph: the caller keeps its bound)."""
    gains = [g for r in ranks if (g := straggler_gain(w, int(r))) is not None and g.gain_ms > 0]
    if not gains or not step_ms:
        return None
    g = max(gains, key=lambda x: x.gain_ms)
    return g.gain_ms, (f"if rank {g.rank} ran at its peers' speed: step {fmt(step_ms - g.gain_ms, 'ms')} "
                       f"(−{fmt(g.gain_ms / step_ms, 'pct')}), most of it in {g.optype} "
                       f"({fmt(g.optype_gain_ms, 'ms')} alone); replay of the dependency graph of all ranks with "
                       "its ops at their op type's mean (docs/simulation.md)")


def simulated_stage_gain(w: WhatIf | None, stage: int, step_ms: float | None) -> tuple[float, str] | None:
    """(gain ms, how) of `stage` running at the mean stage's speed in the replay; None where not simulated."""
    if w is None or w.missing or str(stage) not in w.stage_gains or not step_ms:
        return None
    gain = max(w.stage_gains[str(stage)], 0.0)
    return gain, (f"if stage {stage} ran at the mean stage's speed: step {fmt(step_ms - gain, 'ms')} "
                  f"(−{fmt(gain / step_ms, 'pct')}); replay of the dependency graph of all ranks with the stage's "
                  "ops at their op type's mean over all stages (docs/simulation.md)")
