"""A small device-to-host read that holds the host while queued device work drains (issue #34, class 1).

The host waits on a dependency (the work queued ahead of the copy on its stream), not on a slow copy, so pinned
memory or `non_blocking=True` is the wrong advice: the value is needed on the host, and the read can only be
removed, moved earlier or overlapped. It costs step time only where the device then starves (its next op
launched after the read returned); a host held while the device stays busy costs nothing now, but leaves the
host no slack once the device gets faster. Read from `RankMetrics.held_reads` (metrics/rank/held_reads.py)."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx
from llmdiag.diagnose.rules.idle_calls import IDLE_FLOOR, event_wait_ms, short

HOLD_FLOOR = 0.1  # a site holding the host under 10 % of the step gets no finding


def held_read(c: Ctx) -> list[Finding]:
    """Fires where one call site's reads hold the host HOLD_FLOOR of the step or more, less the idle a stream-event
    wait holds (`event_wait`'s). The gain is the device's starved idle right after those reads (a bound: the most
    their removal gives now), none below IDLE_FLOOR."""
    # the device idle in blocking calls behind a stream-event wait is event_wait's (the read waits on that event,
    # not on queued work draining): taken out first
    bad = [(r, r.held_reads) for r in c.ranks if r.held_reads is not None and r.step_time_ms
           and r.held_reads.held_ms - event_wait_ms(r) >= HOLD_FLOOR * r.step_time_ms]
    if not bad:
        return []
    r, h = max(bad, key=lambda x: x[1].held_ms / x[0].step_time_ms)
    stack = " ← ".join(f"`{short(x, 60)}`" for x in h.stack)
    idle_in = max(0.0, h.held_ms - h.busy_ms)
    others = (f"; all such reads, every site: {fmt(h.all_sites_ms, 'ms')} per step"
              if h.all_sites_ms >= h.held_ms + IDLE_FLOOR * r.step_time_ms else "")
    size = f"{fmt(h.copy_bytes, 'bytes')}, " if h.copy_bytes is not None else ""
    ev = (f"rank {r.rank}: `{short(h.call)}` of a device-to-host copy (`{short(h.copy)}`, {size}{fmt(h.copy_us, 'us')} "
          f"of copy) under {stack or 'no recorded op'} holds the host {fmt(h.held_ms, 'ms')} per step "
          f"({fmt(h.held_ms / r.step_time_ms, 'pct')} of the {fmt(r.step_time_ms, 'ms')} step; "
          f"{fmt(h.calls, 'avg')} reads per step, in {plural(h.steps, 'step')}; the longest {fmt(h.longest_ms, 'ms')} "
          f"in step {h.longest_step}{others}): the copy waits for up to "
          f"{fmt(h.queued, 'int')} device ops launched before it to run first; meanwhile the {c.dev} ran "
          f"{fmt(h.busy_ms, 'ms')} of recorded work and was idle {fmt(idle_in, 'ms')} with that work queued (not "
          f"waiting for the host); after the reads it starved {fmt(h.starved_ms, 'ms')} per step before its next op "
          f"(launched after the read returned); the host's own time is {fmt(h.host_rest_ms, 'ms')} per step "
          f"({plural(len(bad), 'rank')})")
    act = ("the host waits for the device's queue, not for the copy: pinned memory or `non_blocking=True` alone does "
           "not help, since the host still waits before it uses the value. Remove the read, or make it earlier or overlapped: compute "
           "the sizes it reads (e.g. all_to_all split lengths, `.tolist()` / `.item()`) on the CPU from the input "
           "before it goes to the device, read them one step ahead (TorchRec's pipelined `sparse_data_dist`, "
           "`TrainPipelineSparseDist`), or copy them with `non_blocking=True` into pinned memory and wait on an "
           "event only where the value is used; it costs step time once the device no longer has queued work to "
           "hide it (after a device-side fix)")
    gain = statistics.fmean(x.starved_ms for _, x in bad)
    if gain < IDLE_FLOOR * (c.step_ms or 0.0):
        eg, g = (f"none now: the {c.dev} had queued work throughout the hold and starved only "
                 f"{fmt(gain, 'ms')} per step after it; once a device-side fix drains its queue sooner, the read "
                 f"serialises the host's own work ({fmt(h.host_rest_ms, 'ms')} per step, the step less the holds) "
                 f"with the {c.dev}'s: at most that, not estimated"), None
    else:
        g = gain
        eg = c.gain_text(g, f"the {c.dev}'s starved idle after those reads, mean over those ranks", True)
    return [c.finding("held_read", "low", "Host held by a small device-to-host read", ev,
                      [x[0].rank for x in bad], [], act, eg, g, "ranks[].held_reads", gain_kind="bound",
                      events=[short(h.call), short(h.copy)] + [short(x) for x in h.stack[:3]])]
