"""Fusion rule: unfused elementwise kernels (eager RMSNorm, rotary, activations, casts) take a large share of the
GPU's compute, each reading and writing its tensor where a fused kernel would do it once."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
import llmdiag.diagnose.rules.after_fix as after_fix  # not `from rules import`: the package imports every rule
from llmdiag.diagnose.rules.base import Ctx, severity_for

ELEMENTWISE_FLOOR = 0.40  # share of compute kernel time: eager transformer training spends ~15-30 % there
MIN_KERNELS = 100  # per step: many...
MAX_MEDIAN_US = 50.0  # ...and short (memory-bound pointwise kernels, not a few long reductions)
GAIN_FLOOR = 0.05  # of the step: below it the fusable part is not worth a finding


def unfused_elementwise(c: Ctx) -> list[Finding]:
    """Elementwise/reduction kernels above ELEMENTWISE_FLOOR of compute, at least MIN_KERNELS per step with a median
    at most MAX_MEDIAN_US. The gain is a bound: per op pattern its time × (1 − 1/k), k its ops (the data moved
    once instead of k times); ops no pattern names count for nothing; at most the host's waits where the host sets
    the step (after_fix.now), and then also said once a removable bound is fixed (after_fix.clause)."""
    bad = []
    for r in c.ranks:
        h = r.hints
        if r.trace_kind != "gpu" or (h.elementwise_frac or 0) < ELEMENTWISE_FLOOR:
            continue
        if (h.elementwise_per_step or 0) < MIN_KERNELS or (h.elementwise_median_us or 1e9) > MAX_MEDIAN_US:
            continue
        if (h.elementwise_fusable_ms or 0) >= GAIN_FLOOR * r.step_time_ms:
            bad.append(r)
    if not bad:
        return []
    gain = statistics.fmean(after_fix.now(r, r.hints.elementwise_fusable_ms or 0.0) for r in bad)
    w = max(bad, key=lambda r: r.hints.elementwise_frac or 0.0)
    h = w.hints
    top = ", ".join(f"{k} {fmt(v, 'ms')}" for k, v in list(h.elementwise_ms_by_pattern.items())[:5])
    ev = (f"rank {w.rank}: {fmt(h.elementwise_frac, 'pct')} of {fmt(w.compute_ms, 'ms')} compute per step in "
          f"{fmt(h.elementwise_per_step, 'int')} elementwise/reduction kernels per step (median "
          f"{fmt(h.elementwise_median_us, 'us')}); by launching op, per step: {top} ({plural(len(bad), 'rank')})")
    act = ("fuse them: `torch.compile(model)` (Inductor fuses pointwise chains into one Triton kernel each), or fused "
           "kernels for the named patterns: a fused RMSNorm (`torch.nn.RMSNorm` under compile, Apex/TE/Liger "
           "`FusedRMSNorm`), fused rotary embeddings (FlashAttention's/TE's `apply_rotary_emb`), a fused SwiGLU; "
           "keep activations in the autocast dtype to drop the casts")
    own = h.elementwise_fusable_ms or 0.0
    if after_fix.now(w, own) < own:  # the host's waits cap it (as fp32_gemm's and data_movement's)
        ev += (f". The {c.dev} is idle {fmt(h.device_idle_frac, 'pct')} of the step and the host waits for it "
               f"{fmt(h.host_wait_ms or 0.0, 'ms')} per step: the step shortens by at most that now")
    # the gain once a removable bound (DataLoader, allocator) no longer sets the step (rules/after_fix.py)
    after = (bad, "elementwise", "the elementwise kernels shortened by that fusable share")
    ev += after_fix.clause(*after)
    eg = c.gain_text(gain, "per op pattern its time × (1 − 1/k) for its k ops, assuming the fused kernel moves the data "
                     "once (one of the k kernels' worth), at most the host's waits for the device where the host sets the "
                     "step; mean over those ranks" + after_fix.clause(*after, short=True),
                     bound=True)
    return [c.finding("unfused_elementwise", severity_for(gain, c.step_ms), f"Unfused elementwise kernels dominate "
                      f"{c.dev} compute", ev, [r.rank for r in bad], [], act, eg, gain,
                      "ranks[].hints.elementwise_frac", gain_kind="bound",
                      events=["elementwise/reduce kernels", "launching aten ops (innermost cpu_op around the launch)"])]
