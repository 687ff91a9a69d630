"""The exposed-communication rules' gain (dp_overlap, tp_exposed, exposed_comm in rules/comm.py): simulated on each
rank's dependency graph where the what-if covers exactly the rule's collectives, else the bound."""

from __future__ import annotations

from llmdiag.diagnose.rules.base import Ctx


def simulated(r, cs, waits: float) -> float | None:
    """ms per step the rank's steps shorten with these collectives (`cs`, its rows of one role) at zero time,
    re-timed on its dependency graph (RankMetrics.simulated_gain_ms), where the simulation covers exactly them: all
    its communication ("comm"), or every collective of one process group ("comm:<pg>"); None otherwise.

    Zero time is perfect hiding, which no schedule reaches beyond the compute-only time the collectives could run
    under: capped by it, as the bound is. The kernels' time includes waiting for late peers, the straggler's
    (credited there where a straggler finding fires): the exposed part of those waits (`waits`, with no compute
    under it: the part the step could have paid) is taken off. The bound's cap by the
    communication on the critical path is the simulation's own answer, so it is not applied again; the simulated
    gain can exceed that cap where shortening a collective also lets a host blocked on it (a synchronous
    collective, a wait) launch the next work earlier."""
    sim = r.simulated_gain_ms
    mine = {(cc.kind, cc.pg) for cc in cs}
    pgs = {cc.pg for cc in cs}
    if mine == {(cc.kind, cc.pg) for cc in r.comm_by_kind}:
        g = sim.get("comm")
    elif len(pgs) == 1 and mine == {(cc.kind, cc.pg) for cc in r.comm_by_kind if cc.pg in pgs}:
        g = sim.get(f"comm:{next(iter(pgs))}")
    else:
        g = None
    return None if g is None else min(max(0.0, g - waits), r.compute_only_ms)


def kind(simulated: bool) -> str:
    return "simulated" if simulated else "bound"


def gain_text(c: Ctx, gain: float, what: str, simulated: bool) -> str:
    """The exposed-communication rules' gain in words: simulated (`simulated`) or the bound."""
    if simulated:
        return c.gain_text(gain, f"simulated on the rank's dependency graph with the {what} at zero time (hidden), "
                           "capped by the compute-only time it could hide under, less the waits for slower peers; "
                           "mean over the ranks")
    return c.gain_text(gain, f"upper bound: the exposed {what}, capped by the compute-only time it can hide under "
                       "and by the communication on the critical path", bound=True)


def path_holder(c: Ctx, rows: list) -> tuple | None:
    """The row (rank, total, exposed, collectives) of the rank that holds at least half of the job's critical path
    (JobCriticalPath.held_by, metrics/job/critical_path.py), where the exposed rules judge ranks by their mean: a
    straggler's own exposed collectives are what every peer waits behind, but its peers' exposed time is their wait
    for it (taken out), so the mean over ranks dilutes the one rank whose exposure the job pays. None where no
    rank holds half the path or it has no row."""
    cp = c.a.critical_path
    if cp is None or not cp.held_by or not cp.length_ms or len(rows) < 2:
        return None
    rank, ms = max(cp.held_by.items(), key=lambda kv: kv[1])
    if ms < 0.5 * cp.length_ms:
        return None
    return next((x for x in rows if str(x[0].rank) == rank), None)


def on_path(r, exposed: float) -> float:
    """ms per step of communication on the rank's critical path (its share × length, metrics/rank/critical_path):
    what hiding or speeding up its collectives can take off the step; `exposed` where the rank has no path."""
    cp = r.critical_path
    return exposed if cp is None else cp.gpu_communication_bound / 100 * cp.length_ms


def overlap_unmeasured(r) -> bool:
    """An event-sampled rank (RankChores.sampled_share, recorded only below idle_stretch.py's SAMPLED_SHARE): its
    capture drops most kernels, so a collective's overlap with compute reads low where the compute under it was
    dropped, and its critical path is not stated (critical_path/path.py stated): how much of its communication is
    exposed, and whether the step waits on it, cannot be told. The exposure rules leave such ranks out (the
    sampled_capture caveat says totals are lower bounds)."""
    ch = getattr(r, "chores", None)
    return ch is not None and ch.sampled_share is not None
