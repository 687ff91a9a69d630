"""Fusion rules: unfused elementwise kernels (eager RMSNorm, rotary, activations, casts) take a large share of the
GPU's compute (`unfused_elementwise`), or pointwise kernels chained to normalization kernels sit on the path of
the step (`norm_fusion`): each reads and writes its tensor where a fused kernel would do it once."""

from __future__ import annotations


import re

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.lazy_re import lazy_compile
import llmdiag.diagnose.rules.after_fix as after_fix  # not `from rules import`: the package imports every rule
from llmdiag.diagnose.rules.base import Ctx, severity_for
from llmdiag.diagnose.rules.precision import fp32_gemm
from llmdiag.diagnose.metrics.rank.critical_path.after_fix import STEP, WANT

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


NORM_FLOOR = 0.03  # of the step (now, or the step once a removable bound is fixed): the medium grade's floor
NORM_MIN_MS = 0.5  # normalization kernels per step below this: no normalization chain worth a finding
NORM_SIM = "norm_fusion"  # RankMetrics.simulated_gain_ms key (critical_path/simulate.py), and after_fix's candidate


def _elementwise_ranks(c: Ctx) -> set[int]:
    """Ranks the `unfused_elementwise` finding counts (its kernels include the chains' adds and muls)."""
    return {r for f in unfused_elementwise(c) for r in f.evidence.ranks}


def _norm_after(r: RankMetrics) -> tuple[float, float] | None:
    """(ms the fusion takes off once the removable bounds are fixed, the step then) where simulated."""
    after = after_fix.after_fix_ms(r, NORM_SIM)
    if after is None:
        return None
    then = r.simulated_gain_ms.get(STEP) or r.step_time_ms - r.simulated_gain_ms.get(WANT, 0.0)
    return after, then


BN_NAME = lazy_compile(r"\bbn_(fw|bw)_|batch_?norm", re.I)


def _norm_action(kernel: str, training: bool | None) -> str:
    """torch.compile always; conv-BN folding for a BatchNorm only where the capture does not train (training
    BatchNorm needs its batch statistics); a fused add+norm kernel for the other normalizations (transformers)."""
    act = ("fuse the normalization with its neighbours: `torch.compile(model)` (Inductor folds ReLU, the residual "
           "add and their backward into the normalization's own reads and writes)")
    if not BN_NAME.search(kernel[:300]):
        return act + "; or a fused add+LayerNorm / RMSNorm kernel (Apex/TE/Liger `FusedAddRMSNorm`-style)"
    if training is False:
        return act + ("; for inference, fold BatchNorm into the convolution (`torch.fx` conv-BN fusion, "
                      "`torch.ao.quantization.fuse_modules`)")
    return act


def _short(kernel: str) -> str:
    """A kernel's name without its `void ` and arguments, at most 80 characters."""
    return kernel.removeprefix("void ").split("(")[0][:80]


def _after_text(bad: list[RankMetrics], short: bool = False) -> str:
    """The gain once the removable bounds are fixed, where after_fix.clause leaves it out because it is small
    against today's step (it is judged against the step then, NORM_FLOOR)."""
    rows = [(r, a) for r in bad if (a := _norm_after(r)) is not None and a[1] > 0 and a[0] >= NORM_FLOOR * a[1]]
    if not rows:
        return ""
    r, (ms, then) = max(rows, key=lambda p: p[1][0] / p[1][1])
    names = " and ".join(after_fix.NAMES[b].split(" (")[0] if short else after_fix.NAMES[b]
                         for b in after_fix.bounds_of(r))
    verb = "sets" if len(after_fix.bounds_of(r)) == 1 and after_fix.bounds_of(r)[0] not in after_fix.PLURAL else "set"
    return (f"; {fmt(ms, 'ms')} per step once {names} no longer {verb} the step ({fmt(ms / then, 'pct')} of the "
            f"{fmt(then, 'ms')} step then; simulated on rank {r.rank}'s dependency graph, assuming it is fixed first)")


def _norm_qualifies(r: RankMetrics) -> bool:
    nf = r.norm_fusion
    now = r.simulated_gain_ms.get(NORM_SIM)
    if nf is None or now is None or nf.norm_ms < NORM_MIN_MS or r.step_time_ms <= 0:
        return False
    if now >= NORM_FLOOR * r.step_time_ms:
        return True
    aft = _norm_after(r)
    return aft is not None and aft[1] > 0 and aft[0] >= NORM_FLOOR * aft[1]


def norm_fusion(c: Ctx) -> list[Finding]:
    """Normalization kernels with pointwise kernels chained to them (metrics/rank/norm_fusion.py) whose fusion
    shortens the step by ≥ NORM_FLOOR of it, now or once a removable bound (DataLoader, allocator) is fixed. The
    precondition is the rank's dependency graph's: the gain is simulated there (the chain pointwise kernels
    shortened by what fusion removes), so a step the host or a collective sets gives little or nothing. The
    gain is an estimate (the bytes model of metrics/rank/norm_fusion.py); the normalization kernels' own time is
    not counted. Ranks the `unfused_elementwise` finding counts are left to it (the same adds and muls)."""
    skip = _elementwise_ranks(c)
    bad = [r for r in c.ranks if r.trace_kind == "gpu" and r.rank not in skip and _norm_qualifies(r)]
    if not bad:
        return []
    gain = statistics.fmean(r.simulated_gain_ms[NORM_SIM] for r in bad)
    w = max(bad, key=lambda r: r.simulated_gain_ms[NORM_SIM] / r.step_time_ms)
    nf = w.norm_fusion
    assert nf is not None
    ops = ", ".join(f"`{k}` {fmt(v, 'ms')}" for k, v in nf.ops.items())
    lib = "PyTorch's native kernel" if nf.native else "the library's kernel"
    ev = (f"rank {w.rank}: {fmt(nf.norm_count, 'int')} normalization kernels per step take {fmt(nf.norm_ms, 'ms')} "
          f"({fmt(nf.norm_ms / w.compute_ms if w.compute_ms else 0.0, 'pct')} of {fmt(w.compute_ms, 'ms')} compute; "
          f"`{_short(nf.norm_kernel)}` the longest, {fmt(nf.norm_kernel_ms, 'ms')}, {lib}), and "
          f"{fmt(nf.pointwise_count, 'int')} pointwise kernels per step run right before or after them on the same "
          f"stream, {fmt(nf.unary_ms + nf.binary_ms, 'ms')} per step (by launching op: {ops}), each reading and "
          f"writing again a tensor the normalization reads or writes; {fmt(nf.saved_ms, 'ms')} per step of their device time "
          f"is what fusion removes (estimate: one-input ops all of it, two-input ops 2/3: the second operand is "
          f"still read); on the rank's dependency graph with that time removed the step shortens by "
          f"{fmt(w.simulated_gain_ms[NORM_SIM], 'ms')} ({plural(len(bad), 'rank')})")
    after = (bad, NORM_SIM, "the chain pointwise kernels shortened by what fusion removes")
    said = after_fix.clause(*after)
    ev += said or _after_text(bad)
    halves = any(w.rank in f.evidence.ranks for f in fp32_gemm(c))
    if halves:  # graded by what is left after the larger fix: both apply, and the autocast one comes first
        ev += (". The rank also runs fp32 GEMMs (the fp32 finding): under its autocast these kernels move 16-bit "
               "tensors, and this gain about halves; the severity is graded by that half")
    act = _norm_action(nf.norm_kernel, c.training)
    if nf.native and BN_NAME.search(nf.norm_kernel[:300]):
        act += ("; the BatchNorm itself runs PyTorch's native kernel: cuDNN's/MIOpen's (PyTorch hands bf16 BatchNorm "
                "to MIOpen only in recent ROCm releases) or the compiled one may be faster, not counted here")
    eg = c.gain_text(gain, "simulated on the rank's dependency graph with the chain pointwise kernels shortened by what "
                     "fusion is estimated to remove (one-input ops wholly, two-input ops by 2/3), every later op as "
                     "early as its own dependencies allow; the normalization kernels' own time not counted; mean over "
                     "those ranks" + (after_fix.clause(*after, short=True) or _after_text(bad, short=True)))
    return [c.finding(NORM_SIM, severity_for(gain, c.step_ms), f"Normalization and pointwise kernels run unfused on "
                      f"the {c.dev}'s path", ev, [r.rank for r in bad], [], act, eg, gain,
                      "ranks[].norm_fusion", gain_kind="estimate",
                      events=["normalization kernels", "pointwise kernels beside them on their stream",
                              "launching aten ops (innermost cpu_op around the launch)"],
                      grade_ms=gain / 2 if halves else None)]  # what is left after the autocast (docs: Severity)
