"""DDP's gradient copies (issue #34, recall): DistributedDataParallel without `gradient_as_bucket_view=True` copies
every gradient into its all-reduce bucket during backward and back out after the bucket's all-reduce. Reads
`RankMetrics.ddp_copies` (metrics/rank/ddp_copies.py); docs/recommendations.md describes when it fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.ddp_copies import DdpCopies
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

FLOOR = 0.01  # the copies' cost below 1 % of the step gets no finding
MIN_MS = 0.2  # ... nor below 0.2 ms per step


def cost_ms(d: DdpCopies) -> float:
    """What the copy back costs a step at most: the device idle inside its host ops (the device waits for the host's
    per-gradient work there) plus the copies' own device time."""
    return d.back_idle_ms + d.back_device_ms


def _bad(c: Ctx) -> list[tuple[RankMetrics, DdpCopies]]:
    out = []
    for r in c.ranks:
        d = r.ddp_copies
        if d is not None and d.back_ops >= 1 and cost_ms(d) >= MIN_MS and cost_ms(d) >= FLOOR * r.step_time_ms:
            out.append((r, d))
    return out


def ddp_grad_copy(c: Ctx) -> list[Finding]:
    """Precondition read from the trace: DDP's reducer ops, `copy_bucket_to_grad` among them (PyTorch records that op
    only where gradients are not bucket views), with their device copies. The gain is a bound: the device idle inside
    those ops plus the copies' device time (both go with bucket views); the copy into the bucket during backward
    becomes an in-place divide of the same size, so it is not counted."""
    bad = _bad(c)
    if not bad:
        return []
    gain = statistics.fmean(cost_ms(d) for _, d in bad)
    w, d = max(bad, key=lambda x: cost_ms(x[1]))
    ev = (f"rank {w.rank}: {'`DistributedDataParallel.forward` runs, and ' if d.ddp_forward else ''}after each "
          f"bucket's all-reduce DDP copies every gradient back out of its bucket: {fmt(d.back_ops, 'int')} "
          "`torch.distributed.ddp.reducer::copy_bucket_to_grad` ops per step (PyTorch records this op only without "
          f"`gradient_as_bucket_view=True`), their copies{f' (`{d.back_copy}`)' if d.back_copy else ''} "
          f"{fmt(d.back_device_ms, 'ms')} of {c.dev} time and the ops {fmt(d.back_host_ms, 'ms')} of host time per "
          f"step, the {c.dev} idle {fmt(d.back_idle_ms, 'ms')} per step inside them")
    if d.into_ops >= 1:
        ev += (f"; during backward {fmt(d.into_ops, 'int')} `torch::distributed::reducer::mul_out` ops per step copy "
               f"each gradient into its bucket ({fmt(d.into_device_ms, 'ms')} of kernels)")
    ev += f" ({plural(len(bad), 'rank')})"
    act = ("`DistributedDataParallel(model, ..., gradient_as_bucket_view=True)`: gradients become views into the "
           "all-reduce buckets, so the copy back after each all-reduce goes and the copy in during backward becomes "
           "an in-place divide; it also frees one gradient-sized buffer. Assumes the training loop does not call "
           "`detach_()` on gradients or rely on `.grad` being a tensor of its own (the documented limits of bucket "
           "views)")
    eg = c.gain_text(gain, f"the {c.dev} idle inside the copy-back ops (where it waits for the host's per-gradient "
                     f"work) plus the copies' own {c.dev} time, mean over those ranks; the copy into the bucket "
                     "becomes a divide of the same size and is not counted", bound=True)
    return [c.finding("ddp_grad_copy", severity_for(gain, c.step_ms), "DDP copies every gradient into and out of "
                      "its buckets", ev, [r.rank for r, _ in bad], steps_where([w]), act, eg, gain,
                      "ranks[].ddp_copies.back_idle_ms", gain_kind="bound",
                      events=["torch.distributed.ddp.reducer::copy_bucket_to_grad",
                              "torch::distributed::reducer::mul_out", d.back_copy or "Memcpy DtoD (Device -> Device)"])]
