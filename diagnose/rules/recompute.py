"""Activation checkpointing's recomputation (issue #34, recall): the forward that non-reentrant
`torch.utils.checkpoint` runs again inside backward costs device time every step. Reads `RankMetrics.recompute`
(metrics/rank/recompute.py) and the rank's device memory; docs/recommendations.md describes when it fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.recompute import Recompute
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

FLOOR = 0.03  # the recomputed forward below 3 % of the step gets no finding
ROOM = 0.5  # device memory used (peak reserved / capacity) below this: room to save the activations
PATH = ("gpu_compute_bound", "gpu_kernel_kernel_overhead")  # the path's shares the recomputed kernels lie in


def _used(r: RankMetrics) -> float | None:
    """The highest used share of the rank's devices' memory, None where the trace records none (or no capacity)."""
    fr = [m.used_frac for m in r.memory if m.device != "cpu" and m.used_frac is not None]
    return max(fr) if fr else None


def _on_path(r: RankMetrics, d: Recompute) -> float:
    """The recomputed forward's device time with no collective running, at most the device-compute part of the
    rank's critical path: beside a collective it is hidden under the communication (or hides it), so removing it
    shortens the step by the rest only, as data_movement counts its kernels."""
    alone = max(0.0, d.device_ms - d.comm_overlap_ms)
    cp = r.critical_path
    if cp is None:
        return alone
    return min(alone, sum(getattr(cp, k) for k in PATH) / 100 * cp.length_ms)


def _bad(c: Ctx) -> list[tuple[RankMetrics, Recompute]]:
    out = []
    for r in c.ranks:
        d = r.recompute
        u = _used(r)
        if d is not None and r.step_time_ms and d.device_ms >= FLOOR * r.step_time_ms and (u is None or u < ROOM):
            out.append((r, d))
    return out


def activation_recompute(c: Ctx) -> list[Finding]:
    """Precondition read from the trace: `recompute_fn` spans of torch.utils.checkpoint in backward with the device
    work they launch, at least 3 % of the step, and no memory reading that says the activations would not fit (a
    device above half its memory is left alone: checkpointing may be what lets the step run). The gain is a bound:
    the recomputed forward's device time with no collective running, at most the compute on the rank's path."""
    bad = _bad(c)
    if not bad:
        return []
    gain = statistics.fmean(_on_path(r, d) for r, d in bad)
    w, d = max(bad, key=lambda x: x[1].device_ms)
    used = [u for r, _ in bad if (u := _used(r)) is not None]
    ev = (f"rank {w.rank}: activation checkpointing (`torch.utils.checkpoint`, non-reentrant) runs "
          f"{fmt(d.spans, 'int')} checkpointed segments' forward again inside backward per step (`recompute_fn` "
          f"spans, {fmt(d.host_ms, 'ms')} of host time): {fmt(d.kernels, 'int')} {c.dev} ops, "
          f"{fmt(d.device_ms, 'ms')} of {c.dev} time per step, {fmt(d.device_ms / w.step_time_ms, 'pct')} of its "
          f"{fmt(w.step_time_ms, 'ms')} step")
    if d.comm_overlap_ms > 0:
        ev += f" ({fmt(d.comm_overlap_ms, 'ms')} of it beside a collective)"
    if d.transpose_ms > 0:
        ev += f"; {fmt(d.transpose_ms, 'ms')} of it is layout-transpose kernels"
    if used:
        ev += (f"; device memory peaks at {fmt(max(used), 'pct')} of capacity (the highest of those ranks), "
               "room to keep the activations")
    else:
        ev += ("; the trace records no device memory (`profile_memory` off), so whether the saved activations "
               "would fit is not read")
    ev += f" ({plural(len(bad), 'rank')})"
    if used:
        act = ("checkpoint fewer layers, or none (drop the `checkpoint`/`checkpoint_wrapper` calls on the segments "
               "whose activations fit), and check the peak with `torch.cuda.max_memory_allocated()` after the change")
    else:
        act = ("first measure the step's peak device memory (`torch.cuda.max_memory_allocated()`, or "
               "`torch.profiler(profile_memory=True)`); if it leaves room for the checkpointed segments' "
               "activations, checkpoint fewer layers or none (drop the `checkpoint`/`checkpoint_wrapper` calls)")
    how = (f"the recomputed forward's {c.dev} time with no collective running, at most the {c.dev} compute on the "
           "rank's critical path (where communication or the host bounds the step it pays only to that extent), mean "
           "over those ranks")
    if d.comm_overlap_ms > 0:
        how += (f"; the {fmt(d.comm_overlap_ms, 'ms')} beside a collective counts only once the communication no "
                f"longer bounds the step (up to {fmt(d.device_ms, 'ms')} then)")
    if d.transpose_ms > 0:
        how += "; its layout transposes are also counted by a layout finding where one fires"
    if not used:
        how += "; assumes the activations fit (memory unread)"
    eg = c.gain_text(gain, how, bound=True)
    return [c.finding("activation_recompute", severity_for(gain, c.step_ms), "Activation checkpointing recomputes "
                      "the forward in backward", ev, [r.rank for r, _ in bad], steps_where([w]), act, eg, gain,
                      "ranks[].recompute.device_ms", gain_kind="bound",
                      events=["torch/utils/checkpoint.py: recompute_fn"])]
