"""A host-heavy optimizer step (issue #34, recall: hta/sampled_pair's distributed Shampoo, ~200 ms of host time
per step with the device idle through much of it). Reads `RankMetrics.optimizer` (metrics/rank/optimizer_step.py);
docs/recommendations.md describes when it fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.metrics.rank import optimizer_kind as kind
from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.optimizer import OptimizerStep
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

# Fires where the optimizer's device idle is a material share of the rank's step (IDLE_FLOOR, MIN_IDLE_MS) while
# the host holds at least that much of the rank's critical path (the device waits for the optimizer's launches),
# and the optimizer's implementation, read from the op names inside its span (metrics/rank/optimizer_kind.py),
# leaves a switch that cuts its host ops: a per-parameter loop of small kernels (`foreach=True`) or `_foreach_*`
# ops of a class that offers `fused=True` (one op per group instead of one per update term). That switch cuts the
# op count whatever the host's speed, so it holds on a host slow throughout too (hta/nccl_data's foreach SGD: 3
# `_foreach_*` ops, 14.8 ms of host, 0.7 ms of device time, the device idle 14.1 ms per step, 6.5 % of the step).
# An optimizer already fused has no such switch left: silent. Without a named switch (a custom optimizer already
# multi-tensor, Shampoo) the idle must also be a concentrated share of the rank's whole device idle
# (IDLE_SHARE): on a host slow throughout it holds idle in proportion to its ops, and host_bound names the cause.
# hta/sampled_pair's Shampoo: 96.0 / 72.2 ms, 15.8 / 11.8 % of the step, 28.7 / 22.4 % of the idle.
IDLE_FLOOR = 0.05
IDLE_SHARE = 0.15
MIN_IDLE_MS = 1.0  # ... nor below 1 ms per step
SMALL_US = 20.0  # launched kernels' median below this, and many of them: a per-parameter loop of small kernels
MANY = 50  # ... that many per step
FUSED_OFFERED = ("SGD", "Adam", "AdamW", "Adagrad")  # torch.optim classes with a `fused=True` implementation

FOREACH, FUSE, OTHER = "foreach", "fused", "other"


def _lever(o: OptimizerStep) -> str | None:
    """The switch the step's implementation leaves: FOREACH (a per-parameter loop of small kernels), FUSE
    (`_foreach_*` ops of a class offering `fused=True`), OTHER (no named switch: Shampoo, a custom optimizer), None
    (already fused: nothing left for this rule)."""
    if o.impl == kind.FUSED:
        return None
    if "shampoo" in o.name.lower():
        return OTHER
    if not o.multi_tensor and o.kernels >= MANY and o.kernel_median_us < SMALL_US:
        return FOREACH
    if o.impl == kind.FOREACH and o.multi_tensor and o.name in FUSED_OFFERED:
        return FUSE
    return OTHER


def _host_on_path(r: RankMetrics, idle_ms: float) -> bool:
    """The host holds at least `idle_ms` of the rank's critical path per step (its cpu-bound share), where the path
    is stated: the device idle inside the span waits on the host's launches, not on a peer or a queue."""
    cp = r.critical_path
    return cp is None or cp.cpu_bound / 100 * cp.length_ms >= idle_ms


def _bad(c: Ctx) -> list[tuple[RankMetrics, OptimizerStep]]:
    out = []
    for r in c.ranks:
        o = r.optimizer
        if o is None or not r.step_time_ms or r.idle is None or r.idle.idle_ms <= 0 or (lever := _lever(o)) is None:
            continue
        if o.idle_ms < max(MIN_IDLE_MS, IDLE_FLOOR * r.step_time_ms) or not _host_on_path(r, o.idle_ms):
            continue
        if lever == OTHER and o.idle_ms < IDLE_SHARE * r.idle.idle_ms:
            continue
        out.append((r, o))
    return out


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
    lever = _lever(o)
    if lever == FOREACH:
        return (f"use the multi-tensor implementation: `torch.optim.{o.name}(..., foreach=True)`, or `fused=True` "
                "where the optimizer has one (Adam, AdamW, SGD, Adagrad): one kernel over many parameters instead of "
                "one per parameter per update; assumes the parameters are on the device (foreach/fused need that)")
    if lever == FUSE:
        return (f"`torch.optim.{o.name}(..., fused=True)` (a recent PyTorch; on older ones, capture the step in a "
                "CUDA graph or `torch.compile` it): one fused op per parameter group instead of one `_foreach_*` "
                "op per update term, each checking every parameter on the host; assumes the parameters and "
                "gradients are floating-point tensors on the device (what `fused=True` supports)")
    return ("the step's host time is the optimizer's own Python work (it already launches multi-tensor kernels or "
            "few of them): a fused or compiled step (`fused=True` where offered, `torch.compile` of the step), or "
            "fewer parameter groups; assumes the update's math stays the same")


def _impl_words(o: OptimizerStep) -> str:
    if o.impl == kind.FOREACH and o.multi_tensor:
        return (f"; it runs {fmt(o.foreach_ops, 'avg')} `_foreach_*` ops per step (multi-tensor kernels), no fused "
                "one: its host time is their per-parameter host work, not the device's")
    return "; it runs multi-tensor (foreach/fused) ops" if o.multi_tensor else ""


def _path_words(r: RankMetrics) -> str:
    cp = r.critical_path
    if cp is None:
        return ""
    return (f"; nothing runs on the device there, so it waits for the host's next launch: the host holds "
            f"{fmt(cp.cpu_bound / 100 * cp.length_ms, 'ms')} of the rank's {fmt(cp.length_ms, 'ms')} critical path per step")


def optimizer_step(c: Ctx) -> list[Finding]:
    """The optimizer step's host span (`Optimizer.step#<Name>.step`) leaving the device idle a material share of
    the step. Precondition read from the trace: the span and the device idle inside it (no kernel, copy or
    collective of any stream running), at least IDLE_FLOOR of the rank's step, the host holding as much of the
    rank's critical path, and a switch left by the implementation (`_lever`). The gain is that idle, a bound: a
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
          f"{_impl_words(o)}"
          f"{others}{_path_words(w)}"
          f" ({plural(len(bad), 'rank')}){sample}")
    how = f"the {c.dev} idle inside `{o.op}`, mean over those ranks; it shortens the step only where the host bounds it"
    if any(x.sampled for _, x in bad):
        how += "; read from a sample (an upper bound: dropped kernels may fill some of it)"
    eg = c.gain_text(gain, how, bound=True)
    return [c.finding("optimizer_step", severity_for(gain, c.step_ms), f"The {o.name} optimizer step holds the "
                      f"{c.dev} idle", ev, [r.rank for r, _ in bad], steps_where([w]), _action(o), eg, gain,
                      "ranks[].optimizer.idle_ms", gain_kind="bound", events=[o.op, "cudaLaunchKernel"])]
