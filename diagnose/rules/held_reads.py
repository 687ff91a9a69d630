"""A small device-to-host read, or a pageable upload a synchronize waits for, that holds the host while queued
device work drains (issue #34, class 1).

The host waits on a dependency (the work queued ahead of the copy on its stream), not on a slow copy. For a read
the value is needed on the host, so pinned memory or `non_blocking=True` is the wrong advice: the read can only be
removed, moved earlier or overlapped. For an upload from pageable memory (`aten::index` with a CPU index tensor:
`Memcpy HtoD (Pageable -> Device)`, then `cudaStreamSynchronize`) the host needs nothing back: keeping the tensor on
the device, or pinning it and copying `non_blocking=True`, removes the wait. Either costs step time only where the
device then starves: after the drain it idles until the host's next ops reach it (the refill), and it meets the
host's later delays with no lead. Read from `RankMetrics.held_reads` (metrics/rank/held_reads.py) and the what-if
`simulated_gain_ms["held_read"]` (metrics/rank/critical_path/held_read_sim.py)."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.held_reads import HeldReads
from llmdiag.diagnose.rules.base import Ctx
from llmdiag.diagnose.rules.idle_calls import IDLE_FLOOR, event_wait_ms, short

HOLD_FLOOR = 0.1  # a site holding the host under 10 % of the step is stated only where it starves the device
REFILL_FLOOR = 0.005  # a gain under 0.5 % of the step is none (within the host's launch cadence: hta trace_diff
# test's reads leave 0.48 ms of 124 ms, control's 0.50 of 77: the first is called none, the second stated)
RECUR = 0.5  # ... and, below HOLD_FLOOR, only where its reads come back in at least half the steps
KEY = "held_read"  # the what-if's key (metrics/rank/critical_path/held_read_sim.py)


def _gain(r: RankMetrics, h: HeldReads) -> tuple[float, bool]:
    """(ms per step, simulated?): the what-if where the graph was simulated, else the refill after every read."""
    sim = r.simulated_gain_ms.get(KEY)
    return (sim, True) if sim is not None else (h.all_refill_ms, False)


def _stated(r: RankMetrics) -> bool:
    h, step = r.held_reads, r.step_time_ms
    if h is None or not step:
        return False
    held = h.held_ms - event_wait_ms(r)  # a wait on a stream event is event_wait's, not the queue's
    if held >= HOLD_FLOOR * step:
        return True
    return held > 0 and h.steps >= max(2.0, RECUR * r.nsteps) and _gain(r, h)[0] >= REFILL_FLOOR * step


def _site(h) -> str:
    stack = " ← ".join(f"`{short(x, 60)}`" for x in h.stack if x.startswith("#"))
    return f"{stack or 'no annotation'} (`{short(h.call, 60)}`{', an upload' if h.to_device else ''})"


def held_read(c: Ctx) -> list[Finding]:
    """Fires where one call site's reads hold the host HOLD_FLOOR of the step or more (less the idle a stream-event
    wait holds), or, recurring, starve the device REFILL_FLOOR of the step or more after them. The gain: the
    simulated what-if (the waits removed, the steps re-timed) where the graph explains the steps, else the device
    idle after the reads until the host's next op (an estimate); none under REFILL_FLOOR."""
    bad = [(r, r.held_reads) for r in c.ranks if _stated(r) and r.held_reads is not None]
    if not bad:
        return []
    r, h = max(bad, key=lambda x: x[1].held_ms / x[0].step_time_ms)
    stack = " ← ".join(f"`{short(x, 60)}`" for x in h.stack)
    idle_in = max(0.0, h.held_ms - h.busy_ms)
    others = (f"; all such reads, every site: {fmt(h.all_sites_ms, 'ms')} per step"
              if h.all_sites_ms >= h.held_ms + IDLE_FLOOR * r.step_time_ms else "")
    size = f"{fmt(h.copy_bytes, 'bytes')}, " if h.copy_bytes is not None else ""
    what = ("a host-to-device copy from pageable memory that a synchronize after it waits for" if h.to_device
            else "a device-to-host copy")
    comm = (f", {fmt(h.comm_ms, 'ms')} of it communication kernels: the queue it waited on was mostly a collective "
            "(a late peer's wait is the straggler and exposed-communication findings' time, not this read's)"
            if h.comm_ms >= 0.5 * h.busy_ms > 0 else "")
    sites = "; ".join(f"{_site(o)} holds {fmt(o.held_ms, 'ms')}, {fmt(o.refill_ms, 'ms')} idle after"
                      for o in h.others)
    ev = (f"rank {r.rank}: `{short(h.call)}` of {what} (`{short(h.copy)}`, {size}{fmt(h.copy_us, 'us')} "
          f"of copy) under {stack or 'no recorded op'} holds the host {fmt(h.held_ms, 'ms')} per step "
          f"({fmt(h.held_ms / r.step_time_ms, 'pct')} of the {fmt(r.step_time_ms, 'ms')} step; "
          f"{fmt(h.calls, 'avg')} {'copies' if h.to_device else 'reads'} per step, in {plural(h.steps, 'step')}; the longest {fmt(h.longest_ms, 'ms')} "
          f"in step {h.longest_step}{others}): the copy waits for up to "
          f"{fmt(h.queued, 'int')} device ops launched before it to run first; meanwhile the {c.dev} ran "
          f"{fmt(h.busy_ms, 'ms')} of recorded work and was idle {fmt(idle_in, 'ms')} with that work queued (not "
          f"waiting for the host){comm}; after the drain it idled {fmt(h.refill_ms, 'ms')} per step before the first op "
          f"launched after the read returned ({fmt(h.all_refill_ms, 'ms')} after every site's reads: the queue the "
          f"hold drained, refilled late){'; other sites: ' + sites if sites else ''}; the host's own time is "
          f"{fmt(h.host_rest_ms, 'ms')} per step ({plural(len(bad), 'rank')})")
    if h.to_device:
        act = (f"the host waits for the device's queue, not for the copy: PyTorch synchronises after a copy from "
               f"pageable memory (here under {stack or 'no recorded op'}, e.g. indexing with a CPU index tensor). "
               "Build the tensor on the device once and keep it there, or pin it (`.pin_memory()`) and copy it "
               "with `.to(device, non_blocking=True)`: the host then queues on without waiting; assumes the tensor "
               "is not changed on the host while the copy is in flight")
    else:
        act = ("the host waits for the device's queue, not for the copy: pinned memory or `non_blocking=True` alone "
               "does not help, since the host still waits before it uses the value. Remove the read, or make it "
               "earlier or overlapped: compute the sizes it reads (e.g. all_to_all split lengths, `.tolist()` / "
               "`.item()`) on the CPU from the input before it goes to the device, read them one step ahead "
               "(TorchRec's pipelined `sparse_data_dist`, `TrainPipelineSparseDist`), or copy them with "
               "`non_blocking=True` into pinned memory and wait on an event only where the value is used; it costs "
               "step time once the device no longer has queued work to hide it (after a device-side fix)")
    got = [_gain(x, y) for x, y in bad]
    sim = [g for g, s in got if s]
    gain = statistics.fmean(sim) if sim else statistics.fmean(g for g, _ in got)
    if gain < REFILL_FLOOR * (c.step_ms or 0.0):
        starved = statistics.fmean(y.all_refill_ms for _, y in bad)
        sims = f" (removing the waits gains {fmt(gain, 'ms')} per step, simulated)" if sim else ""
        eg, g = (f"none now: the {c.dev} had queued work throughout the hold and starved only "
                 f"{fmt(starved, 'ms')} per step after it{sims}; once a device-side fix drains its queue sooner, the read "
                 f"serialises the host's own work ({fmt(h.host_rest_ms, 'ms')} per step, the step less the holds) "
                 f"with the {c.dev}'s: at most that, not estimated"), None
        kind = "bound"
    elif sim:
        g, kind = gain, "simulated"
        eg = c.gain_text(g, f"simulated: the waits in those calls (every site) removed from the rank's dependency "
                            f"graph and its steps re-timed, each no shorter than its {c.dev}'s work nor than its "
                            f"length less its {c.dev} idle; mean over the {plural(len(sim), 'rank')} the graph "
                            "explains; the idle it removes includes the later host delays (allocator calls, slow "
                            "ops) the host, freed, would meet with a lead, which their own findings may count too")
    else:
        g, kind = gain, "estimate"
        eg = c.gain_text(g, f"estimate: the {c.dev} idle after the reads (every site) until the first op launched "
                            "after each returned, mean over those ranks; the later host delays it meets with no lead "
                            "are not counted (the graph does not explain these steps well enough to simulate it)")
    return [c.finding("held_read", "low", "Host held by a small device-to-host read" if not h.to_device else
                      "Host held by a synchronised copy from pageable memory", ev,
                      [x[0].rank for x in bad], [], act, eg, g, "ranks[].held_reads", gain_kind=kind,
                      events=[short(h.call), short(h.copy)] + [short(x) for x in h.stack[:3]])]
