"""Rules on device idle that one kind of host call explains: blocking copies and syncs, stream-event waits, and a
single long host op (allocator calls: rules/allocator.py). Each action states the precondition it relies on and
fires only where the trace shows it: fusion advice never for idle one host event holds (that is host_bound's, for
many short launches)."""

from __future__ import annotations

import re

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.metrics.rank.idle_stretch import COVER, SAMPLED_SHARE
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for
from llmdiag.diagnose.rules.one_time import one_time
from llmdiag.diagnose.model.lazy_re import lazy_compile

IDLE_FLOOR = 0.05  # an idle part below 5 % of the step gets no finding
ALLOC_RE = lazy_compile(r"Malloc|Free|MemAlloc|MemFree", re.I)
COPY_RE = lazy_compile(r"Memcpy", re.I)
LAUNCH_RE = lazy_compile(r"Launch", re.I)


def short(name: str, n: int = 80) -> str:
    """A name from a trace (untrusted, unbounded) cut for a one-line evidence text; outputs escape it."""
    return name if len(name) <= n else name[: n - 1] + "…"


def op_with_stack(s) -> str:
    """`op` (under `a` ← `b`): an IdleStretch's event and the ops enclosing it, innermost first."""
    under = " ← ".join(f"`{short(x, 60)}`" for x in s.stack[:3])
    return f"`{short(s.op)}`" + (f" (under {under})" if under else "")


def in_step(n: int) -> str:
    """Where a stretch happened: its ProfilerStep, or the capture where the trace marks no step."""
    return f"in step {n}" if n >= 0 else "in the capture (no ProfilerStep marks steps)"


def stack_caveat(r) -> str:
    """Where the trace records Python stacks, host times include the profiler's own recording of them."""
    n = r.idle.python_events if r.idle is not None else 0
    return (f"; the trace records Python stacks ({fmt(n, 'int')} python_function events, `with_stack=True`): host "
            "times include the profiler's own stack recording, so without it this idle may be much smaller"
            if n else "")


def _ops_text(r, ops: dict) -> str:
    calls = r.idle.runtime_calls
    return ", ".join(f"`{short(k)}` {fmt(v, 'ms')} ({fmt(calls.get(k), 'avg')} calls)"
                     for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:4])


def _blocking(c: Ctx, alloc: bool, less=lambda r: 0.0) -> list[tuple]:
    """(rank, idle ms per step in the chosen blocking calls less `less(rank)`, {op: ms}) for ranks above the floor."""
    out = []
    for r in c.ranks:
        if r.idle is None:
            continue
        ops = {k: v for k, v in r.idle.runtime_ops.items() if bool(ALLOC_RE.search(k)) == alloc}
        tot = sum(ops.values()) - less(r)
        if tot > 0 and (tot >= IDLE_FLOOR * r.step_time_ms or (alloc and _flush_own_step(r))):
            out.append((r, tot, ops))
    return out


def _outlier_step(r):
    """(step record, median step's allocator idle ms) where one step holds most of the allocator idle (at least
    half of it and twice the median step's), else (None, median)."""
    al = r.idle.alloc_steps
    per = [a.idle_ms for a in al] + [0.0] * max(0, r.nsteps - len(al))
    med = float(statistics.median(per)) if per else 0.0
    if not al:
        return None, med
    top = max(al, key=lambda a: a.idle_ms)
    if top.idle_ms >= 0.5 * sum(per) and top.idle_ms >= 2 * med and len(per) > 1:
        return top, med
    return None, med


def _flushes(top) -> bool:
    """The outlier allocator step frees the cache (frees at least half its mallocs: a release, then the refill
    that allocates back about as many blocks and the retried one): the caching allocator calls the driver's free
    only to release its cache and retry an allocation that failed (or on `empty_cache()`), so this is memory
    pressure, whichever step it falls in; growth (mallocs without frees) is the cache reaching its working size.
    torchrec sst_sleep's step 5: 14 frees, 16 mallocs; opt_3's step 4: 25 frees, 9 mallocs."""
    frees = top.calls - top.mallocs
    return frees > 0 and 2 * frees >= top.mallocs


def _flush_own_step(r) -> bool:
    """A flush (`_flushes`) judged against its own step: the step holding most of the allocator idle frees the
    cache and that idle is at least IDLE_FLOOR of that step's time. A straggler's 1-s steps (torchrec sst_sleep:
    a 101 ms flush in step 5, 41 ms per step over 3 steps, under 5 % of the mean step) must not hide it."""
    top, _ = _outlier_step(r)
    if top is None or not _flushes(top):
        return False
    st = next((s for s in r.steps if s.step == top.step), None)
    return bool(st and st.time_ms and top.idle_ms >= IDLE_FLOOR * st.time_ms)


def event_wait_ms(r) -> float:
    """Blocking-call idle per step whose device op was queued behind a stream-event wait (IdleStretch.event_wait):
    the event's time, not the call's."""
    if r.idle is None or not r.nsteps:
        return 0.0
    return sum(s.idle_ms for s in r.idle.stretches if s.event_wait is not None) / r.nsteps


def event_wait(c: Ctx) -> list[Finding]:
    """Device idle while the host blocks in a synchronous copy or sync whose device op sat on its stream behind
    a stream-event wait (`cudaStreamWaitEvent` / `hipStreamWaitEvent`): the dependency, not the call, holds the
    time, so asynchronous copies or pinned memory give nothing back. Names the waiting stream, the recording
    stream and what ran there (metrics/rank/event_waits.py). The gain is a bound: that idle per step."""
    bad = [(r, event_wait_ms(r)) for r in c.ranks]
    bad = [(r, g) for r, g in bad if g > 0 and g >= IDLE_FLOOR * r.step_time_ms]
    if not bad:
        return []
    gain = statistics.fmean(g for _, g in bad)
    r, g = max(bad, key=lambda x: x[1])
    held = [s for s in r.idle.stretches if s.event_wait is not None]
    s, w = held[0], held[0].event_wait
    rec = (f"recorded on stream {w.record_stream} after `{short(w.record_op)}` (by launch order"
           + (f"; that work ended {fmt(w.record_done_before_ms, 'ms')} before the wait released" if
              w.record_done_before_ms is not None else "") + ")" if w.record_stream >= 0 else
           "whose record the trace does not tie to a stream")
    ev = (f"rank {r.rank}: the {c.dev} is idle {fmt(g, 'ms')} per step while the host blocks in {op_with_stack(s)}; "
          f"its device work was queued on stream {w.wait_stream} behind `{short(w.queued_op)}`, which started "
          f"{fmt(w.queued_ms, 'ms')} after its launch because stream {w.wait_stream} waited (`{short(w.call)}`) on "
          f"an event {rec}; {plural(len({x.step for x in held}), 'step')} of {r.nsteps} "
          f"({plural(len(bad), 'rank')})")
    act = (f"the {c.dev} waits on the event, not on the copy or sync: making the copy asynchronous or pinning host "
           f"memory would not remove it. Find why the event on stream {w.record_stream if w.record_stream >= 0 else '?'}"
           " completes late (the work queued there before the record, or a record issued late by another thread), "
           "and wait for it only where its result is needed (`stream.wait_event` / `wait_stream` just before the "
           "consumer), so independent work can run meanwhile")
    eg = c.gain_text(gain, "the device idle while the queued work waited on the event, mean over those ranks", True)
    return [c.finding("event_wait", severity_for(gain, c.step_ms), f"{c.Dev} idle behind a stream-event wait", ev,
                      [x[0].rank for x in bad], sorted({x.step for x in held}), act, eg, gain,
                      "ranks[].idle.stretches[].event_wait", gain_kind="bound",
                      events=[short(w.call), short(s.op), short(w.queued_op)] + ([short(w.record_op)] if w.record_op else []))]


def host_sync(c: Ctx) -> list[Finding]:
    """Device idle while the host blocks on the device: synchronous copies (`cudaMemcpy`, `hipMemcpyWithStream`),
    syncs and `.item()`. The host cannot queue the next kernels until the call returns. The longest stretch one
    call holds is named with the ops around it; the fix follows the call (asynchronous copy, or no host read).
    Idle whose device op waited on a stream-event wait is the event's (`event_wait`), not counted here."""
    out: list[Finding] = []
    bad = _blocking(c, alloc=False, less=event_wait_ms)
    if not bad:
        return out
    r, tot, ops = max(bad, key=lambda x: x[1])
    ev = (f"rank {r.rank}: {fmt(tot, 'ms')} of the {fmt(r.step_time_ms, 'ms')} step the {c.dev} is idle while the "
          f"host blocks in {_ops_text(r, ops)} per step ({plural(len(bad), 'rank')})")
    held = [s for s in r.idle.stretches if s.cause == "runtime" and not ALLOC_RE.search(s.op) and s.event_wait is None]
    once = _typical(r, tot) < tot
    # Simulated where every such rank has the what-if (the host no longer waits in its synchronizing calls, re-timed
    # on its dependency graph) and no one-off step holds most of the idle (the simulation's mean would charge every
    # step with it). It can exceed the idle bound: a sync serialises host and device, so the idle it causes also
    # lies after it, under the host work that follows, which without the wait runs while the device computes.
    sims = [x[0].simulated_gain_ms.get("host_sync") for x in bad]
    simulated = not once and all(g is not None for g in sims)
    gain = statistics.fmean([g for g in sims if g is not None] if simulated else [_typical(x[0], x[1]) for x in bad])
    if simulated:
        ev += (f"; simulated on the rank's dependency graph with the host not waiting in those calls (its work "
               f"after them runs while the {c.dev} computes): rank {r.rank}'s steps shorten by "
               f"{fmt(r.simulated_gain_ms['host_sync'], 'ms')}")
    if once:
        where = ", ".join(f"step {s.step}: {fmt(s.idle_ms, 'ms')}" for s in held[:2])
        ev += (f"; most of it is one-off ({where}; {plural(len({s.step for s in held}), 'step')} of {r.nsteps}), "
               f"the typical step {fmt(_typical(r, tot), 'ms')}")
    names = list(ops) + [s.op for s in held] + [x for s in held for x in s.stack]
    if held:
        s = held[0]
        ev += (f"; the longest: {op_with_stack(s)} holds the {c.dev} idle {fmt(s.idle_ms, 'ms')} {in_step(s.step)} "
               f"(the call took {fmt(s.op_ms, 'ms')})")
    acts = []
    if any(n == "aten::_copy_from" for n in names):  # a non-CUDA backend's synchronous copy (MTIA's)
        acts.append(f"these are synchronous host<->{c.dev} copies (`aten::_copy_from`, "
                    f"{fmt(r.idle.runtime_calls.get('aten::_copy_from'), 'avg')} per step), not host work: batch "
                    f"small tensors into one transfer, keep them on the {c.dev} across steps, and copy "
                    "asynchronously where the backend supports it (`non_blocking=True` from pinned memory)")
    elif any(COPY_RE.search(n) or n in ("aten::to", "aten::_to_copy", "aten::copy_") for n in names):
        acts.append("make the copies asynchronous: a copy to or from pageable host memory holds the host until it is "
                    "done, so pin the host buffer (`tensor.pin_memory()`, `DataLoader(pin_memory=True)`) and copy "
                    "with `.to(..., non_blocking=True)`, reading a device-to-host result only after later work is "
                    "queued; or create the tensor on the device (`torch.tensor(..., device=device)`)")
    if not acts or any(re.search(r"item|scalar|nonzero|Synchronize", n) for n in names):
        acts.append("avoid `.item()` / `.cpu()` / `print(tensor)` and other host reads in the step (accumulate on "
                    "the device, log every N steps); find them with `torch.cuda.set_sync_debug_mode(\"warn\")`")
    if simulated:
        eg = c.gain_text(gain, "simulated on the rank's dependency graph: the host no longer waits for its device in "
                         "those calls (waits on a stream event left to `event_wait`), mean over the ranks")
    else:
        eg = c.gain_text(gain, "upper bound: the device idle while the host blocks on those calls" + (
            "; where one step holds most of it (a first copy, a one-off sync), the typical step's" if once else ""),
            True)
    sev = severity_for(gain, c.step_ms) if gain >= IDLE_FLOOR * c.step_ms else "low"
    return out + [c.finding("host_sync", sev, f"{c.Dev} idle behind host synchronisation", ev,
                            [x[0].rank for x in bad], [s.step for s in held[:1]], "; ".join(acts), eg, gain,
                            "ranks[].idle.runtime_ops", gain_kind="simulated" if simulated else "bound",
                            events=[short(k) for k in sorted(ops)] + [short(s.op) for s in held[:1]])]


def _typical(r, tot: float) -> float:
    """The blocking idle per step of the steps that do not hold a long stretch, where fewer than half the steps
    hold one and those stretches are most of it: one long copy or sync in one step (the first profiled step's
    batch copy) is not what every step pays. Else `tot`, the mean."""
    held = [s for s in r.idle.stretches if s.cause == "runtime" and not ALLOC_RE.search(s.op) and s.event_wait is None]
    n = r.nsteps or 0
    steps = {s.step for s in held}
    one_off = sum(s.idle_ms for s in held)
    if n < 2 or not held or len(steps) * 2 >= n or one_off < 0.5 * tot * n:
        return tot
    return max(0.0, tot * n - one_off) / (n - len(steps))


def single_op_ms(r, recurring: bool = False) -> float:
    """Host-bound idle per step that single long host ops hold (IdleStretch cause "host"): not launch overhead.
    `recurring`: leave out one-time setups (rules/one_time.py: a first call of a shape the other steps do not
    repeat), which are not paid per step."""
    if r.idle is None or not r.nsteps:
        return 0.0
    return sum(s.idle_ms for s in r.idle.stretches if s.cause == "host"
               and not (recurring and one_time(r, s))) / r.nsteps


def one_time_setup(c: Ctx) -> list[Finding]:
    """Device idle under the first call of an op's shape whose later calls are much shorter (cuBLASLt's setup of a
    GEMM shape, a kernel's first load): a one-time cost, kept apart from the per-step cost and never divided per
    step. Low, no gain: it is not paid again in steady state. Only where the other steps do not repeat the stall
    (rules/one_time.py): one that recurs is a per-step cost, host_op_stall's."""
    got = [(r, [s for s in r.idle.stretches if one_time(r, s)]) for r in c.ranks if r.idle is not None]
    got = [(r, h) for r, h in got if h]
    if not got:
        return []
    r, held = max(got, key=lambda x: sum(s.idle_ms for s in x[1]))
    tot = sum(s.idle_ms for s in held)
    steps = sorted({s.step for s in held if s.step >= 0})
    calls = "; ".join(f"`{short(s.op, 60)}` {fmt(s.op_ms, 'ms')} ({_why_first(s)})" for s in held[:4])
    where = f"in {plural(len(steps), 'step')} of {r.nsteps}" if steps else "in the capture"
    loads = sum(s.first_use for s in held)
    said = (f"; {plural(loads, 'first-use load')} (a kernel loaded at its first launch, `Lazy Function Loading`, or a "
            f"module load) start{'s' if loads == 1 else ''} in these stalls" if loads else "")
    ev = (f"rank {r.rank}: the {c.dev} is idle {fmt(tot, 'ms')} in all under the first call of "
          f"{plural(len(held), 'op shape')} ({calls}), {where}: the same "
          f"op with the same Input Dims runs far shorter afterwards, or is called once and loads a kernel or module "
          f"in the stall{said} ({plural(len(got), 'rank')}){stack_caveat(r)}")
    act = ("a one-time setup (first call of a shape: cuBLASLt heuristics, kernel loading), not a per-step cost: "
           "warm up before profiling (a `schedule(wait=..., warmup=...)` that skips the first steps); nothing to "
           "change in the step")
    return [c.finding("host_op_stall", "low", f"{c.Dev} idle during one-time setup (first call of a shape)", ev,
                      [x[0].rank for x in got], steps, act, "none in steady state: paid once, not per step", None,
                      "ranks[].idle.stretches[].later_calls_ms", gain_kind="bound",
                      events=[short(s.op) for s in held[:4]])]


def _why_first(s) -> str:
    """Why stretch `s` is a first call: its later calls' median, or the first-use loads in it (an op called once)."""
    if s.later_calls_ms is not None:
        return f"later calls {fmt(s.later_calls_ms, 'ms')}"
    return f"called once; {plural(s.first_use, 'first-use load')} in it"


def sampled(r) -> bool:
    """The trace's host ops have holes in their numbering everywhere (event-sampled): an op with no child and no
    launch over a stretch cannot be told from the events left out of it."""
    share = r.idle.op_ids_contiguous if r.idle is not None else None
    return share is not None and share < SAMPLED_SHARE


def host_op_stall(c: Ctx) -> list[Finding]:
    """Device idle that one long host op holds (a stretch ≥ 1 ms, half or more under that one op): host work in
    that op, which fusion and CUDA graphs do not remove. Names the op, its stack and the step; the gain is a
    bound: that idle, mean over the profiled steps (the evidence says in which steps it happened). Silent on a
    rank whose trace is event-sampled (`sampled`): hta/sampled_pair's 140 ms `aten::_foreach_mul_` records 6
    launches in its first 7 ms and no event at all on its thread for the other 133, which is missing events, not
    host work."""
    bad = []
    for r in c.ranks:
        g = single_op_ms(r, recurring=True)
        if g > 0 and g >= IDLE_FLOOR * r.step_time_ms and not sampled(r):
            bad.append((r, g))
    if not bad:
        return one_time_setup(c)
    gain = statistics.fmean(g for _, g in bad)
    r = max(bad, key=lambda x: x[1])[0]
    held = [s for s in r.idle.stretches if s.cause == "host" and not one_time(r, s)]
    s = held[0]
    steps = sorted({x.step for x in held if x.step >= 0})
    others = "; also " + ", ".join(f"`{short(x.op, 60)}` {fmt(x.idle_ms, 'ms')}" + (f" (step {x.step})" if x.step >= 0
                                                                                     else "") for x in held[1:4]) \
        if len(held) > 1 else ""
    where = (f"{fmt(single_op_ms(r, True), 'ms')} per step over the {plural(r.nsteps, 'profiled step')}, in "
             f"{plural(len(steps), 'step')}" if steps else f"{fmt(single_op_ms(r, True), 'ms')} in all")
    bare = s.unrecorded_ms >= COVER * s.idle_ms  # the idle fits in a stretch of the op with nothing recorded
    ev = (f"rank {r.rank}: the {c.dev} is idle {fmt(s.idle_ms, 'ms')} {in_step(s.step)} while the host runs "
          f"{op_with_stack(s)} ({fmt(s.op_ms, 'ms')}), with no launch or blocking call in between"
          + (f"; the op records nothing under it (no child op or runtime call) for {fmt(s.unrecorded_ms, 'ms')}: "
             "unprofiled host time" if bare else "")
          + f"{others}; {where} ({plural(len(bad), 'rank')}){stack_caveat(r)}")
    if COPY_RE.search(s.op):
        act = (f"a copy call holding the host {fmt(s.op_ms, 'ms')}: it waits for the stream's earlier work or stages "
               "pageable memory; copy from pinned memory (`tensor.pin_memory()`) with `non_blocking=True`, and "
               "read the result on the host only after later work is queued (or not in the step)")
    elif LAUNCH_RE.search(s.op):
        act = (f"one launch call taking {fmt(s.op_ms, 'ms')} is the runtime loading the kernel's code (first launch, "
               "lazy module loading), not launch overhead: a warm-up cost; profile steps after warm-up (a later "
               "`schedule(wait=..., warmup=...)`) before acting on it")
    elif bare:
        act = (f"a host stall inside `{short(s.op)}` that no profiled op accounts for (the op's own code between its "
               "children: a first-call setup, a lock or the GIL, I/O, a host-side wait), not launch overhead: torch.compile or CUDA graphs do not remove "
               "it; find it with `py-spy dump` or `torch.profiler(with_stack=True)`, then remove it, precompute it or "
               "move it off the step's critical path, or give the device independent work to overlap it")
    else:
        act = (f"host work inside `{short(s.op)}`, not launch overhead: torch.compile or CUDA graphs do not remove it; "
               "find what the op does on the host (`torch.profiler(with_stack=True)`, `py-spy dump`), precompute it "
               "or move it off the step's critical path (into the data pipeline or a background thread), or give "
               "the device independent work to overlap it")
    eg = c.gain_text(gain, "the device idle under that one host op, mean over the profiled steps and those ranks",
                     True)
    sev = severity_for(gain, c.step_ms)
    if all(LAUNCH_RE.search(x.op) for x in held):  # code loading on first launch: gone after warm-up
        sev, gain = "low", None
        eg = "none in steady state: a first-launch (warm-up) cost, not paid again once the kernels are loaded"
    title = f"{c.Dev} idle during one long host op" if len({x.op for x in held}) == 1 else \
        f"{c.Dev} idle during long host ops"
    return [c.finding("host_op_stall", sev, title, ev,
                      [x[0].rank for x in bad], steps, act, eg, gain, "ranks[].idle.stretches", gain_kind="bound",
                      events=[short(x.op) for x in held[:4]] + [short(x) for x in s.stack[:3]])]
