"""Gradient accumulation rule: FSDP re-gathers the parameters in every microstep.

With N microsteps per optimizer step FSDP2 still all-gathers every layer in each microstep's forward (and again
in backward when it reshards after forward), while the gradient reduce-scatter runs once. Keeping the
parameters unsharded between microsteps gathers once per optimizer step.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

GATHER_FLOOR = 0.03  # all-gather time per optimizer step, as a share of the step


def accum_fsdp_regather(c: Ctx) -> list[Finding]:
    acc = c.a.accum
    if not acc or acc.microsteps < 2 or not c.step_ms or acc.regather_ms_per_step < GATHER_FLOOR * c.step_ms:
        return []
    n = acc.microsteps
    gain = acc.regather_ms_per_step
    ev = (f"{n} microsteps per optimizer step ({'llmdiag/forward labels' if acc.source == 'labels' else 'manifest'}); "
          f"data-parallel all-gathers {fmt(acc.allgather_ms_per_step, 'ms')} per optimizer step, of which "
          f"{fmt(acc.regather_ms_per_step, 'ms')} re-gather parameters in microsteps 2..{n}; gradient reduction "
          f"{fmt(acc.reduce_ms_per_step, 'ms')} (already once)")
    action = ("keep parameters gathered across the accumulation microsteps (`--accum-keep-gathered`: FSDP2 "
              "`set_reshard_after_forward(False)` and `set_reshard_after_backward(False)` on all but the last "
              "microstep); costs the unsharded parameters' memory")
    return [c.finding("accum_fsdp_regather", severity_for(gain, c.step_ms),
                      "FSDP re-gathers parameters in every accumulation microstep", ev, [r.rank for r in c.ranks],
                      steps_where(c.ranks), action,
                      c.gain_text(gain, f"the all-gathers of microsteps 2..{n} skipped", bound=True), gain,
                      "accum.regather_ms_per_step", gain_kind="bound",
                      events=["llmdiag/forward", "all-gather collectives"])]
