"""A capture of cold steps only (issue #34, recall): every profiled step is one of the profiler's first and pays a
one-time cost, so no step shows the steady state. The per-step rules then either read one-time costs as per-step
ones or, once those are set aside (rules/one_time.py, host_op_stall), find too little left to claim a gain on
(host_bound's floor for a few launches): silence about what the capture does show. This finding states it, scoped:
what the critical path holds once the one-time stalls are taken off (host or device, the host's op work against
its launch calls, how busy the device is and with which kernels), the assumption that steady steps look like that,
and the capture that would check it. No gain: none can be read from cold steps alone.

Cold, per rank (every ProfilerStep rank of the job): each step is numbered at most COLD_FIRST (torch.profiler
numbers its steps from 0; a schedule that waits and warms up records none of those) and holds a one-time stall
of at least IDLE_FLOOR of its time: a first call of an op's shape the other steps do not repeat (rules/one_time.py)
or a launch call holding the device idle for 1 ms or more (a stretch, metrics/rank/idle_stretch.py), read as
host_op_stall reads it: the runtime loading a kernel's code at its first launch, unless other steps repeat it.
hta amd_mi250_minitoy: ProfilerStep#1 alone (its #2 is the profiler's stop), 6.54 ms of its 8.91 ms under one
`hipLaunchKernel`.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx
from llmdiag.diagnose.rules.idle_calls import LAUNCH_RE, sampled, stack_caveat
from llmdiag.diagnose.rules.one_time import one_time, recurs

COLD_FIRST = 2  # the highest ProfilerStep number read as a first step: the profiler's steps #0-#2
IDLE_FLOOR = 0.05  # a one-time stall under 5 % of its step leaves the step as good as steady
HOST_MOST = 0.5  # the host's share of the rest of the path from which the rest reads host-bound
OP_WORK = ("host_op", "host_gap")  # critical-path causes of the host's own op work (metrics/rank/critical_path)
DEVICE = ("compute", "memcpy", "memset", "communication", "launch_delay", "kernel_gap", "event_wait")
SCHEDULE = "torch.profiler.schedule(wait=1, warmup=2, active=5)"


def first_launch(r, s) -> bool:
    """A launch call holding the device idle (a host stretch, 1 ms or more) that no other step repeats: the
    runtime loading the kernel's code at its first launch (host_op_stall's reading of such a call)."""
    return s.cause == "host" and bool(LAUNCH_RE.search(s.op)) and not recurs(r, s)


def setup(r, s) -> bool:
    """A one-time stall: a first call of a shape (rules/one_time.py) or a kernel's first launch."""
    return one_time(r, s) or first_launch(r, s)


def _cold(r: RankMetrics) -> list | None:
    """The rank's one-time stalls where every step is cold (module docstring), else None."""
    cp = r.critical_path
    if (r.trace_kind != "gpu" or r.idle is None or sampled(r) or cp is None or not cp.causes or cp.steps_left_out
            or r.steps_source != "ProfilerStep" or not r.steps or (r.steps_total or len(r.steps)) != len(r.steps)):
        return None
    held = [s for s in r.idle.stretches if setup(r, s)]
    for st in r.steps:
        once = sum(s.idle_ms for s in held if s.step == st.step)
        if st.step > COLD_FIRST or not st.time_ms or once < IDLE_FLOOR * st.time_ms:
            return None
    return held


def _rest(r, held: list, once: float) -> dict[str, float]:
    """The rank's mean critical path per step, ms, with the one-time stalls (`once` ms per step) taken off. A stall
    is device idle the host holds, so all of it lies on the path, on the host: a launch call's under `runtime`, an
    op's under its op work; the device's share of the path is left whole. Keys: length, host, device, op (the host's
    op work and the gaps between ops), runtime (runtime calls)."""
    cp, n = r.critical_path, len(r.steps)
    ms = {k: v / 100.0 * cp.length_ms for k, v in cp.causes.items()}
    launch = sum(s.idle_ms for s in held if not one_time(r, s)) / n  # the first launches: `setup` less one_time
    length = max(0.0, cp.length_ms - once)
    device = min(length, sum(ms.get(k, 0.0) for k in DEVICE))
    return {"length": length, "host": length - device, "device": device,
            "op": max(0.0, sum(ms.get(k, 0.0) for k in OP_WORK) - (once - launch)),
            "runtime": max(0.0, ms.get("runtime", 0.0) - launch)}


def cold_capture(c: Ctx) -> list[Finding]:
    """Every profiled step of every ProfilerStep rank is cold (`_cold`): one low finding, no gain, stating what
    the path shows with the one-time stalls set aside, what that assumes, and the capture to check it."""
    ranks = [r for r in c.ranks if r.steps_source == "ProfilerStep" and r.trace_kind == "gpu"]
    got: list[tuple[RankMetrics, list]] = []
    for x in ranks:
        held = _cold(x)
        if held is None:
            return []
        got.append((x, held))
    if not got:
        return []
    r, held = max(got, key=lambda x: sum(s.idle_ms for s in x[1]))
    cp, n = r.critical_path, len(r.steps)
    if cp is None:
        return []
    once = sum(s.idle_ms for s in held) / n
    rest = _rest(r, held, once)
    if rest["length"] <= 0:
        return []
    host = rest["host"] / rest["length"]
    busy = max(0.0, r.step_time_ms - r.idle_ms)
    names = ", ".join(f"ProfilerStep#{st.step}" for st in r.steps)
    stalls = "; ".join(f"`{s.op[:60]}` {fmt(s.idle_ms, 'ms')} in step {s.step} ("
                       + ("a launch call: read as the kernel's code loaded at its first launch" if not one_time(r, s)
                          else "the first call of its shape") + ")" for s in held[:3])
    h, lch = r.hints, r.launch
    kern = (f"; {fmt(h.kernels_per_step, 'int')} kernels per step, median {fmt(h.median_kernel_us, 'us')}, "
            f"{fmt(h.short_kernel_frac, 'pct')} under 10 µs" if h.kernels_per_step else "")
    if kern and lch is not None and lch.kernel_launch_ms_per_step is not None:
        spent = lch.kernel_launch_ms_per_step - sum(s.op_ms for s in held if not one_time(r, s)) / n
        kern += f", whose launch calls take {fmt(max(0.0, spent), 'ms')} per step besides the one-time ones"
    alike = f" ({plural(len(got), 'rank')} alike)" if len(got) > 1 else ""
    k = h.kernels_per_step or 0
    per = f" ({fmt(1e3 * rest['op'] / k, 'us')} per kernel launched)" if k else ""
    ev = (f"rank {r.rank}: the capture holds {plural(n, 'step')} ({names}, among the profiler's first "
          f"{COLD_FIRST + 1} steps, #0-#{COLD_FIRST}) and {'it pays' if n == 1 else 'every one pays'} a one-time "
          f"cost: {stalls}; no step shows the steady state. With "
          f"those {fmt(once, 'ms')} per step set aside, the rest of the step's critical path, {fmt(rest['length'], 'ms')}"
          f" of {fmt(cp.length_ms, 'ms')}, is {fmt(host, 'pct')} host: the host's op work and the gaps "
          f"between ops {fmt(rest['op'], 'ms')}{per}, runtime calls {fmt(rest['runtime'], 'ms')}, the {c.dev}'s work "
          f"{fmt(rest['device'], 'ms')}; the {c.dev} is busy {fmt(busy, 'ms')} per step "
          f"({fmt(busy / rest['length'], 'pct')} of that rest, {fmt(busy / r.step_time_ms, 'pct')} of the whole step)"
          f"{kern}{alike}{stack_caveat(r)}. Assumed: steady steps look like "
          "these less their one-time costs (the same ops, every kernel loaded and every shape set up); the trace holds "
          "no step to check it against")
    act = (f"capture steady steps before acting on per-step numbers: `{SCHEDULE}` with `prof.step()` after every "
           "iteration, so the recorded steps follow warm-up (kernels loaded, every shape set up)")
    if host >= HOST_MOST:
        act += (f"; if they look like these less the one-time costs, the step is host-bound (the {c.dev} busy "
                f"{fmt(busy / rest['length'], 'pct')} of it): give each kernel more work (a larger batch), or cut the "
                "host's per-op work with CUDA/HIP graphs (`torch.compile(mode=\"reduce-overhead\")`) or "
                "`torch.compile`")
    else:
        act += (f"; if they look like these less the one-time costs, the {c.dev}'s work sets the step "
                f"({fmt(1 - host, 'pct')} of the rest of the path): read that capture's findings")
    return [c.finding("cold_capture", "low", "Only cold steps captured: the steady state is not in the trace", ev,
                      [x.rank for x, _ in got], [st.step for st in r.steps], act,
                      "unknown: no steady step to measure it on (none claimed)", None, "ranks[].critical_path.causes",
                      events=[f"ProfilerStep#{st.step}" for st in r.steps] + [s.op[:60] for s in held[:3]])]
