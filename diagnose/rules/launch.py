"""The launch-overhead rule: device idle where the device waits for the host to launch its next work.

It reads `ranks[].idle.launch_wait` (metrics/rank/launch_wait.py): the device idle in short gaps (< 1 ms) that end
with work launched after the gap began, while host ops run or none does. Every such gap is on the step's critical
path (the device had nothing queued: the host's next launch ends it), so that idle is a bound on what removing
per-launch host cost gives back. It is named "behind kernel launches" only where the launch calls themselves hold
at least half of it; else it is the host's op work between launches (Python, ATen dispatch). Idle another finding
owns is not counted: zero_grad's fills (chores), blocking calls, the DataLoader, communication waits, single long
host ops (gaps of 1 ms or more), the profiler's own cost where the manifest gives it.
"""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where
from llmdiag.diagnose.rules.idle_calls import sampled, single_op_ms, stack_caveat

IDLE_FLOOR = 0.05  # an idle part below 5 % of the step gets no finding
MANY_LAUNCHES = 50  # kernels per step below which launch overhead cannot be what keeps the device idle
# Below MANY_LAUNCHES, the host-bound idle per launch must exceed what dispatching one eager op costs (~10-150 µs)
# for "the host is slow between launches" to be a claim: a toy with 7 kernels idles ~130 µs per launch.
FEW_LAUNCH_GAP_US = 200.0
CALLS_MOST = 0.5  # the launch calls' share of the waited idle from which the finding says "behind kernel launches"
LAUNCH_IDLE = 0.15  # (summaries without launch_wait) device idle less what other rules hold, as a share of the step


def _owned(r) -> float:
    """Idle per step of the waited gaps that another finding owns: zero_grad's fills (one short gap per fill)."""
    return (r.chores.zero_grad_idle_ms or 0.0) if r.chores is not None else 0.0


def _slow(r) -> float:
    """Waited idle per step in gaps of 1 ms or more while host ops run, less what single long ops hold (theirs:
    host_op_stall): the host slow between launches over many ops, not per-launch cost."""
    lw = r.idle.launch_wait if r.idle is not None else None
    return max(0.0, lw.long_ops_ms - single_op_ms(r)) if lw is not None else 0.0


def _gain(c: Ctx, r) -> float | None:
    """The rank's launch-waited idle per step less what others own and the profiler's cost; None where the rank
    does not qualify. Summaries written before launch_wait fall back to the host-bound idle split."""
    h = r.hints
    if r.trace_kind != "gpu" or h.device_idle_frac is None or (r.idle is not None and sampled(r)):
        return None
    kps = h.kernels_per_step or 0
    cost = _profiler_cost(c, r.rank) or 0.0
    lw = r.idle.launch_wait if r.idle is not None else None
    if lw is not None:
        gain = max(0.0, lw.wait_ms - _owned(r) - cost) + _slow(r)
        if kps < MANY_LAUNCHES and gain * 1e3 < FEW_LAUNCH_GAP_US * max(kps, 1):
            return None  # a few launches each behind an eager op's dispatch: a tiny job, nothing to move off
    elif r.idle is not None:  # a summary without launch_wait: the host-bound idle, less single long ops
        if h.device_idle_frac < LAUNCH_IDLE:
            return None
        gain = max(0.0, r.idle.host_bound_ms - cost - single_op_ms(r))
        other = r.idle.dataloader_ms + r.idle.runtime_ms + single_op_ms(r)
        if h.device_idle_frac * r.step_time_ms - other < LAUNCH_IDLE * r.step_time_ms:
            return None
        if kps < MANY_LAUNCHES and gain * 1e3 < FEW_LAUNCH_GAP_US * kps:
            return None
    else:  # a summary without the idle split: mostly short kernels, idle less bubble and DataLoader waits
        short, med = h.short_kernel_frac, h.median_kernel_us
        if h.device_idle_frac < LAUNCH_IDLE or not ((short is not None and short >= 0.5) or
                                                    (short is None and med is not None and med < 10)):
            return None
        p = c.a.pipeline
        bubble = (p.measured * p.window_ms) if p else 0.0
        gain = max(0.0, (h.device_idle_frac - (h.dataloader_frac or 0.0)) * r.step_time_ms - bubble)
    return gain if gain > 0 and gain >= IDLE_FLOOR * r.step_time_ms else None


def host_bound(c: Ctx) -> list[Finding]:
    """Device idle in short gaps the host's next launch ends (the device had nothing queued): per-launch host cost
    sets the pace there. Precondition: that idle, less what other findings own, at least IDLE_FLOOR of the step,
    and many launches (MANY_LAUNCHES) or more idle per launch than an eager op's dispatch (FEW_LAUNCH_GAP_US).
    Severity by its share of the step; the gain is a bound (each such gap is on the critical path; what fusion or
    graphs recover of it depends on the ops). "Behind kernel launches" only where the launch calls themselves hold
    at least CALLS_MOST of that idle; else "behind host ops" (the host's op work between launches). No CUDA-graph
    advice where the step holds an all_to_all (data-dependent splits)."""
    bad = [(r, g) for r in c.ranks if (g := _gain(c, r)) is not None]
    if not bad:
        return []
    gain = statistics.fmean(g for _, g in bad)
    r, g = max(bad, key=lambda x: x[1])
    h, lw = r.hints, (r.idle.launch_wait if r.idle is not None else None)
    many = (h.kernels_per_step or 0) >= MANY_LAUNCHES
    kern = (f"{fmt(h.kernels_per_step, 'int')} kernels per step, median {fmt(h.median_kernel_us, 'us')}, "
            f"{fmt(h.short_kernel_frac, 'pct')} under 10 µs")
    slow = _slow(r)
    launches = lw is None or lw.in_launch_ms >= CALLS_MOST * g
    per_launch = lw is None or slow < 0.5 * g  # most of it in short gaps: per-launch cost
    if lw is not None and r.idle is not None:
        ib = r.idle
        rest = max(0.0, lw.wait_ms - lw.in_launch_ms)
        ev = (f"rank {r.rank}: the {c.dev} waits for the host's next launch {fmt(lw.wait_ms, 'ms')} per step in gaps "
              "under 1 ms that end with work launched after the gap began (nothing was "
              f"queued: each gap is on the step's critical path); {kern}; of that idle, "
              f"{fmt(lw.in_launch_ms, 'ms')} falls inside the launch calls themselves and {fmt(rest, 'ms')} in the "
              "host's op work between launches (Python, ATen dispatch)"
              + (": the launch calls are most of it" if launches else ": the host's op work is the cost, not the "
                 "launch calls"))
        if _owned(r) > 0:
            ev += (f"; {fmt(min(_owned(r), lw.wait_ms), 'ms')} of it is zero_grad's fills (their own finding), not "
                   "counted")
        if slow > 0:
            ev += (f"; {fmt(slow, 'ms')} per step more waits in gaps of 1 ms or more while host ops run, none "
                   "holding most of a gap (counted: the host slow between launches)")
        if lw.long_ms > slow:
            ev += (f"; {fmt(lw.long_ms - slow, 'ms')} per step in gaps of 1 ms or more that one host op holds or "
                   "no op is recorded in (host_op_stall, stalls), not counted")
        ev += (f"; the rest of the {fmt(ib.idle_ms, 'ms')} idle: {fmt(ib.queued_ms, 'ms')} waits on "
               f"queued work, {fmt(ib.runtime_ms, 'ms')} in blocking runtime calls, "
               f"{fmt(ib.dataloader_ms, 'ms')} on the DataLoader")
        if h.shapes_recorded and not ib.python_events:
            ev += ("; the trace records Input Dims (`record_shapes=True`): the profiler's per-op recording adds to "
                   "the host's time between launches, so unprofiled this idle is smaller")
    else:
        ev = f"rank {r.rank}: {c.dev} idle {fmt(h.device_idle_frac, 'pct')} of the step, {kern}"
    cost = _profiler_cost(c, r.rank)
    if cost:
        ev += (f"; without the profiler a step took {fmt(r.step_time_ms - cost, 'ms')} (`llmdiag run`'s unprofiled "
               f"steps), so {fmt(cost, 'ms')} per step of that host time is the profiler's own, taken off the gain")
    ev += f" ({plural(len(bad), 'rank')} alike){stack_caveat(r)}"
    a2a = any(cs.kind == "alltoall" for x, _ in bad for cs in x.comm_by_kind)
    graphs = ("; not CUDA graphs: the step holds all_to_all, whose splits are data-dependent" if a2a else
              ", or CUDA graphs (`torch.compile(mode=\"reduce-overhead\")` / `torch.cuda.CUDAGraph`) to replay the "
              "step's launches without host work")
    if not many or not per_launch:
        act = ("the host is slow between launches, not the kernels: profile the Python side of the step "
               "(`py-spy record`), move per-step host work (logging, metric math, data munging) off the training "
               "thread" + (f" (with {fmt(h.kernels_per_step, 'int')} kernels per step, launch overhead is not what the "
                          "host spends its time on: fusion or CUDA graphs would not help)" if not many else
                          " (most of the idle is in long gaps of host work, not per-launch cost)"))
    elif launches:
        act = "`torch.compile(model)` to fuse the short kernels (fewer launches)" + graphs
    else:
        act = ("the host's op work between launches is the cost, not the launch calls: profile the Python side of "
               "the step (`py-spy record`), move per-step host work (logging, metric math, data munging) off the "
               "training thread; `torch.compile(model)` removes per-op Python and dispatch overhead"
               + (_inference_graphs() if not a2a and not any(x[0].training and x[0].training.training for x in bad)
                  else ""))
    eg = c.gain_text(gain, "the device idle waiting for the host's next launch in short gaps, mean over those ranks "
                     "(each gap on the critical path); what fusion or graphs actually recover depends on the ops",
                     bound=True)
    title = f"{c.Dev} idle behind kernel launches" if launches else f"{c.Dev} idle behind host ops between launches"
    return [c.finding("host_bound", severity_for(gain, c.step_ms), title, ev,
                      [x[0].rank for x in bad], steps_where([r], lambda st: st.idle_ms >= 0.15 * st.time_ms),
                      act, eg, gain, "ranks[].idle.launch_wait.wait_ms" if lw else "ranks[].idle.host_bound_ms",
                      gain_kind="bound", events=["kernels", "runtime launch calls", "host ops overlapping device idle"])]


def _profiler_cost(c: Ctx, rank: int) -> float | None:
    """Profiled minus unprofiled step time of `rank`, from the manifest of an own run (None for foreign traces)."""
    return c.a.manifest.profiler_cost_ms(rank) if c.a.manifest else None


def _inference_graphs() -> str:
    """Inference (no backward, no optimizer: RankMetrics.training): a replayed CUDA graph runs the captured
    forward without its Python and dispatch, the host op work included, where its shapes are static (serving
    engines capture one graph per batch size)."""
    return ("; in inference, CUDA graphs replay the captured forward without its host work (vLLM: leave "
            "`enforce_eager` off; else `torch.compile(mode=\"reduce-overhead\")`), for static shapes")

