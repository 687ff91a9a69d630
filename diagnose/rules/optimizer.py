"""A host-heavy optimizer step (issue #34, recall: hta/sampled_pair's distributed Shampoo, ~200 ms of host time
per step with the device idle through much of it). Reads `RankMetrics.optimizer` (metrics/rank/optimizer_step.py);
docs/recommendations.md describes when it fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.optimizer import OptimizerStep
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

# Fires where the optimizer's device idle is a material share of the rank's step (IDLE_FLOOR) AND a concentrated
# share of the rank's whole device idle (IDLE_SHARE). The second keeps silent a host slow throughout, where the
# optimizer holds idle in proportion to its ops and host_bound / slow_host_ops name the cause: hta/nccl_data's SGD
# holds 14.1 ms, 6.5 % of the step but 8.6 % of its 163.5 ms of idle; the planted host_bound_fp32 (8 ms of host per
# op everywhere) 35.2 ms, 8.3 % of the step, 11.2 % of the idle. hta/sampled_pair's Shampoo: 96.0 / 72.2 ms,
# 15.8 / 11.8 % of the step, 28.7 / 22.4 % of the idle; the other real sets hold at most 2.9 % of the step.
IDLE_FLOOR = 0.05
IDLE_SHARE = 0.15
MIN_IDLE_MS = 1.0  # ... nor below 1 ms per step
SMALL_US = 20.0  # launched kernels' median below this, and many of them: a per-parameter loop of small kernels
MANY = 50  # ... that many per step


def _bad(c: Ctx) -> list[tuple[RankMetrics, OptimizerStep]]:
    return [(r, r.optimizer) for r in c.ranks if r.optimizer is not None and r.step_time_ms
            and r.idle is not None and r.idle.idle_ms > 0 and r.optimizer.idle_ms >= MIN_IDLE_MS
            and r.optimizer.idle_ms >= IDLE_FLOOR * r.step_time_ms and r.optimizer.idle_ms >= IDLE_SHARE * r.idle.idle_ms]


def _action(o: OptimizerStep) -> str:
    if "shampoo" in o.name.lower():
        comm = ("; for the collective it launches (distributed Shampoo's all-gather of the updates), a smaller "
                "`DDPShampooConfig(communication_dtype=...)` and `num_trainers_per_group` (how many ranks split the "
                "preconditioner work, so how wide the all-gather is)" if o.comm_ms > 0 else "")
        per_tensor = ("its update launches one kernel per tensor, no multi-tensor kernel (a `_foreach_*` op on its slow "
                      "path: keep each list's tensors on one device, dtype and layout so it takes the multi-tensor "
                      "path; a larger `max_preconditioner_dim` groups fewer, larger blocks); "
                      if not o.multi_tensor and o.kernels else "")
        return (per_tensor + "precondition less often (Shampoo's `precondition_frequency`: its root-inverse work runs every that "
                "many steps) and start later (`start_preconditioning_step`)" + comm +
                "; assumes convergence holds with staler preconditioners (check the loss curve)")
    if not o.multi_tensor and o.kernels >= MANY and o.kernel_median_us < SMALL_US:
        return (f"use the multi-tensor implementation: `torch.optim.{o.name}(..., foreach=True)`, or `fused=True` "
                "where the optimizer has one (Adam, AdamW, SGD, Adagrad): one kernel over many parameters instead of "
                "one per parameter per update; assumes the parameters are on the device (foreach/fused need that)")
    return ("the step's host time is the optimizer's own Python work (it already launches multi-tensor kernels or "
            "few of them): a fused or compiled step (`fused=True` where offered, `torch.compile` of the step), or "
            "fewer parameter groups; assumes the update's math stays the same")


def optimizer_step(c: Ctx) -> list[Finding]:
    """The optimizer step's host span (`Optimizer.step#<Name>.step`) leaving the device idle a material share of
    the step. Precondition read from the trace: the span and the device idle inside it (no kernel, copy or
    collective of any stream running), at least IDLE_FLOOR of the rank's step and IDLE_SHARE of its device idle. The gain is that idle, a bound: a
    cheaper step shortens the step by it only where nothing else then waits for the host."""
    bad = _bad(c)
    if not bad:
        return []
    gain = statistics.fmean(o.idle_ms for _, o in bad)
    w, o = max(bad, key=lambda x: x[1].idle_ms)
    sample = " (from an event-sampled capture: kernels are dropped with their launches, so the idle is an upper " \
             "bound and the launches a lower one; the span's length is exact)" if o.sampled else ""
    comm = (f", {fmt(o.comm_ms, 'ms')} of it collectives (`{o.comm_name}`)" if o.comm_ms > 0 else "")
    idle = w.idle.idle_ms if w.idle is not None else o.idle_ms  # _bad kept only ranks with it
    others = f"; the other optimizers' steps take {fmt(o.others_ms, 'ms')} more per step" if o.others_ms else ""
    ev = (f"rank {w.rank}: `{o.op}` takes {fmt(o.host_ms, 'ms')} of host time per step "
          f"({fmt(o.host_ms / w.step_time_ms, 'pct')} of the step); the {c.dev} is idle {fmt(o.idle_ms, 'ms')} per step "
          f"inside it ({fmt(o.idle_ms / idle, 'pct')} of the rank's device idle); it launches {fmt(o.kernels, 'avg')} device ops "
          f"per step ({fmt(o.kernel_ms, 'ms')} of device "
          f"time, median {o.kernel_median_us:.1f} µs{comm})"
          f"{'; it runs multi-tensor (foreach/fused) ops' if o.multi_tensor else ''}"
          f"{others}"
          f" ({plural(len(bad), 'rank')}){sample}")
    how = f"the {c.dev} idle inside `{o.op}`, mean over those ranks; it shortens the step only where the host bounds it"
    if any(x.sampled for _, x in bad):
        how += "; read from a sample (an upper bound: dropped kernels may fill some of it)"
    eg = c.gain_text(gain, how, bound=True)
    return [c.finding("optimizer_step", severity_for(gain, c.step_ms), f"The {o.name} optimizer step holds the "
                      f"{c.dev} idle", ev, [r.rank for r, _ in bad], steps_where([w]), _action(o), eg, gain,
                      "ranks[].optimizer.idle_ms", gain_kind="bound", events=[o.op, "cudaLaunchKernel"])]
