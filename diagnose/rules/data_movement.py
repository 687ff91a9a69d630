"""Device time spent moving data rather than computing: concatenations, the layout transposes a convolution library
runs for NCHW tensors, same-dtype copies. Reads `RankMetrics.data_movement` (metrics/rank/data_movement.py);
docs/recommendations.md describes when it fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.data_movement import MoveFamily
from llmdiag.diagnose.model.format import fmt, plural
import llmdiag.diagnose.rules.after_fix as after_fix  # not `from rules import`: the package imports every rule
from llmdiag.diagnose.rules.base import Ctx, host_sets_step, severity_for, steps_where

SHARE = 0.10  # a family below 10 % of the rank's compute time gets no finding: healthy recommendation models in the real traces carry 2-6 % of cat/copy kernels (trace_diff, sampled_pair, a100 all-to-all), so a family stands out above that band;
# the edit gives back only part of the bound where the data must still move once
MIN_MS = 0.5  # ... nor below 0.5 ms per step on the device's busy path

WHAT = {"cat": "concatenation", "layout": "NCHW<->NHWC layout-transpose", "copy": "copy"}

ACTION = {
    "cat": ("the concatenations run every step: preallocate the output once and write each piece into a view of it "
            "(`out[a:b].copy_(x)` or an op's `out=`), or keep the pieces as views of one buffer so no `torch.cat` is "
            "needed; a `SplitWithSizesBackward0` parent is the backward of a forward `split`: its gradient is a "
            "concatenation, gone where the forward reads views of one tensor without splitting it"),
    "layout": ("`model.to(memory_format=torch.channels_last)` and the inputs `x.to(memory_format=torch.channels_last)`: "
               "the convolutions already run NHWC kernels on this device (their kernel names say so), and the library "
               "transposes every NCHW tensor into and out of them. Assumes the model runs NCHW (PyTorch's default) "
               "and that the library picks NHWC kernels at least as fast for channels_last tensors"),
    "copy": ("find the `.contiguous()` / `.clone()` / `.reshape()` of a non-contiguous tensor that makes them (the "
             "launching op and its parent below) and keep the producer's layout, or let the consumer take the strided "
             "tensor; casts (`aten::_to_copy`) are not counted"),
}


SHORT = {"cat": "preallocate and write into views", "layout": "channels_last", "copy": "find the .contiguous() / .clone()"}
MIOPEN = ("; on ROCm also `PYTORCH_MIOPEN_SUGGEST_NHWC=1` in the environment: PyTorch's MIOpen path keeps NCHW for "
          "channels_last tensors without it in many releases (these transposes are MIOpen's)")


def _action(f: MoveFamily) -> str:
    rocm = f.kernel.startswith("batched_transpose") or any("miopen" in o.op for o in f.ops)
    return ACTION[f.family] + (MIOPEN if f.family == "layout" and rocm else "")


def _qualifies(r: RankMetrics, f: MoveFamily) -> bool:
    if f.family == "layout" and not f.nhwc_convs:
        return False  # channels_last helps only where the convolutions have NHWC kernels on this device
    return _saving(r, f, capped=False) >= MIN_MS and r.compute_ms > 0 and f.kernel_ms >= SHARE * r.compute_ms


def _saving(r: RankMetrics, f: MoveFamily, capped: bool = True) -> float:
    """ms per step the step can lose: the kernels' time with no other kernel running and no collective beside them
    (a step a collective sets does not shorten by the work under it), at most the host's waits for the device
    where the device idles ≥ HOST_BOUND_IDLE of the step (a host that never waits sets the step, as for fp32_gemm:
    faster device work only lengthens the idle)."""
    g = max(0.0, f.busy_ms - f.under_comm_ms)
    return after_fix.now(r, g) if capped else g


def _ops_text(f: MoveFamily) -> str:
    return "; ".join(f"`{o.op}`" + (f" under `{o.parent}`" if o.parent else "")
                     + f" {fmt(o.ms, 'ms')} per step ({plural(round(o.count), 'kernel')})" for o in f.ops)


def data_movement(c: Ctx) -> list[Finding]:
    """Precondition read from the trace: a family's kernels by name, launched by the named host ops (convolution ops
    running NHWC kernels, for the layout family), at ≥ SHARE of the rank's compute and ≥ MIN_MS per step on the busy
    path. The gain is a bound: the kernels' time when no other kernel, memcpy or memset runs; the edit may still move
    the data once, and where the step waits on the host or on communication the step shortens less."""
    bad: dict[str, list[tuple[RankMetrics, MoveFamily]]] = {}
    for r in c.ranks:
        for f in (r.data_movement.families if r.data_movement else []):
            if _qualifies(r, f):
                bad.setdefault(f.family, []).append((r, f))
    if not bad:
        return []
    gains = {fam: statistics.fmean(_saving(r, f) for r, f in rows) for fam, rows in bad.items()}
    fam = max(gains, key=lambda k: (gains[k], k))
    rows, gain = bad[fam], gains[fam]
    w, f = max(rows, key=lambda x: x[1].busy_ms)
    ev = (f"rank {w.rank}: {WHAT[fam]} kernels (`{f.kernel}` the longest) take {fmt(f.kernel_ms, 'ms')} of {c.dev} "
          f"time per step ({plural(round(f.count), 'kernel')}), {fmt(f.kernel_ms / w.compute_ms, 'pct')} of its compute "
          f"({fmt(w.compute_ms, 'ms')}); {fmt(f.busy_ms, 'ms')} per step of it with no other kernel running (the "
          f"{c.dev}'s busy path")
    ev += (f", {fmt(f.under_comm_ms, 'ms')} of that beside a collective)" if f.under_comm_ms >= 0.05 else ")")
    ev += f". Launched by: {_ops_text(f)}. {plural(len(rows), 'rank')} above the rule's floors"
    if host_sets_step(w) and _saving(w, f) < _saving(w, f, capped=False):  # the host's waits cap it
        ev += (f". The {c.dev} is idle {fmt(w.idle_ms / w.step_time_ms, 'pct')} of the step and the host waits for it "
               f"{fmt(w.hints.host_wait_ms or 0.0, 'ms')} per step: the step shortens by at most that now")
    # the gain once a removable bound (DataLoader, allocator) no longer sets the step (rules/after_fix.py)
    after = ([r for r, _ in rows], f"data_movement:{fam}", f"the {WHAT[fam]} kernels removed")
    ev += after_fix.clause(*after)
    others = [k for k in bad if k != fam]
    if others:
        ev += ". Also: " + ", ".join(f"{WHAT[k]} kernels {fmt(gains[k], 'ms')} per step ({SHORT[k]})"
                                     for k in sorted(others))
    eg = c.gain_text(gain, f"the {WHAT[fam]} kernels' {c.dev} time with no other kernel and no collective running, "
                     "at most the host's waits for the device where the host sets the step, mean over those ranks; "
                     "the data may still move once after the edit" + after_fix.clause(*after, short=True), bound=True)
    return [c.finding("data_movement", severity_for(gain, c.step_ms), f"{c.Dev} time spent on {WHAT[fam]} kernels",
                      ev, [r.rank for r, _ in rows], steps_where([w]), _action(f), eg, gain,
                      "ranks[].data_movement.families[].busy_ms", gain_kind="bound",
                      events=[f.kernel] + [o.op for o in f.ops])]
