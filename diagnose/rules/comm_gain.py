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
    (credited there where a straggler finding fires): those waits are taken off. The bound's cap by the
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
