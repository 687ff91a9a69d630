"""A slow collective on a rank whose host sets the step (low_busbw, rules/comm.py; issue #34 recall, hta/nccl_data).

There the device idles waiting for the host's next launch, and the op that consumes a collective's result (DDP's
copy of each all-reduced bucket back into the gradients) is launched after the collective has ended: nothing waits
on it, so the rank's critical path holds almost none of it (comm_gain.on_path) and a faster link takes nothing off
the step *now*. Once the host no longer sets the step (the host-side findings above it) the same collective can sit
on the path in full: that later bound is what this module states, ordered after the host fix, never added to the
gain. Its kernel time is all it reads; from the traced ranks alone a slow transfer and a wait for a peer that
arrived late look the same (the kernel starts when this rank launches it and ends when the last peer's data
arrives), which the words say where some ranks are not traced."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, host_sets_step
from llmdiag.diagnose.rules.comm_gain import on_path


def held_now(r, cc) -> float:
    """ms per step of the collectives `cc` (one CommKind row) that the rank's step waits on now: their time on the
    rank's dependency-graph simulation at zero time (RankMetrics.simulated_gain_ms) where it covers exactly the
    collectives of their process group, else the rank's communication on its critical path (comm_gain.on_path, all
    kinds together: an upper bound for one of them)."""
    sim = r.simulated_gain_ms or {}
    rows = [x for x in r.comm_by_kind if x.pg == cc.pg]
    g = sim.get(f"comm:{cc.pg}") if cc.pg and rows == [cc] else sim.get("comm") if r.comm_by_kind == [cc] else None
    return on_path(r, cc.total_ms) if g is None else g


def later_bound(xs: list, bw: float, target: float) -> float | None:
    """ms per step the collectives `xs` ((rank, CommKind) pairs) can cost once the host no longer sets the step: their
    whole kernel time per step × (1 − busbw / target), mean over the ranks, an upper bound (all of it on the path, all
    of it transfer). None unless every rank's host sets its step (rules/base.py host_sets_step)."""
    if not xs or not all(host_sets_step(r) for r, _ in xs):
        return None
    return statistics.fmean(cc.total_ms / r.nsteps for r, cc in xs) * (1 - bw / target)


def words(c: Ctx, xs: list) -> str:
    """The evidence: bytes and time read from the kernels, how much of it the critical path holds now, and what one
    rank cannot tell."""
    r, cc = max(xs, key=lambda x: x[1].total_ms / x[0].nsteps)
    n = r.nsteps
    exposed = (cc.total_ms - cc.overlapped_ms) / n
    held = min(exposed, held_now(r, cc))
    idle = r.hints.device_idle_frac or 0.0
    out = (f"; rank {r.rank}: {fmt(cc.bytes / n, 'bytes')} in {fmt(cc.count / n, 'avg')} kernels per step taking "
           f"{fmt(cc.total_ms / n, 'ms')} (mean message {fmt(cc.bytes / cc.sized_count, 'bytes')}), "
           f"{fmt(exposed, 'ms')} of it with no compute beside it, but the {c.dev} idles {fmt(idle, 'pct')} of the "
           f"step (the host sets the step) and the step waits on at most {fmt(held, 'ms')} of it per step (its "
           "dependency graph): the ops that use its result are launched after it has ended, so the rest of its time "
           "costs the step nothing now")
    ws = c.a.world_size
    if ws and len(c.ranks) < ws:
        out += (f"; {plural(len(c.ranks), 'rank')} of {ws} traced: a kernel's time includes waiting for peers that "
                "arrive late, so a slow link or a late peer, the traces cannot tell which")
    return out
