"""Where a straggler's peers wait, worded for its finding: the collective kinds and process groups whose
matched instances carry the arrival skew, how often the straggler was last there, and every late rank with
its mean lateness. Read from SkewResult (metrics/job/skew.py); nothing is recomputed here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdiag.diagnose.model.format import fmt

if TYPE_CHECKING:
    from llmdiag.diagnose.model.skew import SkewResult

WAIT_FLOOR = 0.02  # a collective whose skew costs the waiting ranks under 2 % of the step is not named
MAX_KINDS = 3
MAX_NAMED = 5  # stragglers named per collective; a 16k-rank job may have hundreds
MAX_LATE = 16  # late ranks listed by name; the rest are counted (all are in skew.late_ms_by_rank)


def where_peers_wait(sk: SkewResult, nsteps: float, step_ms: float, stragglers: list[int]) -> str:
    """"peers wait at all_to_all on pg 'x': 8 matched, mean arrival skew 3.1 ms (26 % of the step); rank 7
    last at 5 of them" for the collectives whose skew per step is largest (at least WAIT_FLOOR of the step)."""
    rows = sorted(sk.by_collective, key=lambda b: -b.mean_skew_ms * b.matched)
    parts = []
    for b in rows:
        per_step = b.mean_skew_ms * b.matched / nsteps if nsteps else 0.0
        if len(parts) >= MAX_KINDS or (parts and per_step < WAIT_FLOOR * step_ms):
            break
        last = [f"rank {r} last at {b.last_arrivals[str(r)]}" for r in stragglers if b.last_arrivals.get(str(r))]
        last = last[:MAX_NAMED] + ([f"{len(last) - MAX_NAMED} more"] if len(last) > MAX_NAMED else [])
        where = f"{b.kind}" + (f" on pg '{b.pg}'" if b.pg else "")
        parts.append(f"{where}: {b.matched} matched, mean arrival skew {fmt(b.mean_skew_ms, 'ms')} "
                     f"({fmt(per_step / step_ms, 'pct')} of the step)" + (f", {', '.join(last)}" if last else ""))
    return ("peers wait at " + "; at ".join(parts)) if parts else ""


def late_ranks(sk: SkewResult) -> str:
    """"late ranks (mean lateness where late, times late): rank 7 2.10 ms ×5, rank 5 1.20 ms ×3" for every rank
    the matcher found late at some collective (schedule-ordered ones excluded), latest first."""
    n = sk.late_n_by_rank or {}
    rows = sorted(((int(r), ms / n[r], n[r]) for r, ms in (sk.late_ms_by_rank or {}).items() if n.get(r)),
                  key=lambda x: (-x[1] * x[2], x[0]))
    if not rows:
        return ""
    shown = ", ".join(f"rank {r} {fmt(mean, 'ms')} ×{k}" for r, mean, k in rows[:MAX_LATE])
    more = f" and {len(rows) - MAX_LATE} more (skew.late_ms_by_rank)" if len(rows) > MAX_LATE else ""
    return f"late ranks (mean lateness where late × times late): {shown}{more}"


CAUSE_SHARE = 0.25  # a part of the straggler's timeline names the cause when its excess is ≥ 25 % of the wait


def _peer_median(ranks, fn) -> float:
    vals = sorted(fn(r) for r in ranks)
    return vals[len(vals) // 2] if vals else 0.0


def straggler_cause(rank, peers, wait_ms: float) -> tuple[str, str]:
    """(what its own timeline shows, the action for it), read from the straggler's per-step breakdown against
    its peers' median: a host-thread stall inside or before its collective ops (RankMetrics.comm_host_stall, the
    autograd thread included), device idle with no profiled host op (a host stall), host ops with no kernel in flight,
    blocking runtime calls (named), the DataLoader, or compute (uneven work, its heaviest kernels named). The
    part with the largest excess names the cause when it covers CAUSE_SHARE of the wait; else none is named."""
    def idle(part):
        return lambda r: getattr(r.idle, part) if r.idle is not None else 0.0

    def thread(r):
        return r.comm_host_stall.ms_per_step if r.comm_host_stall is not None else 0.0

    # a host-thread stall at its collectives first: when the device idle also shows it, it is the same time, read
    # one step closer to the late collective (which thread, which op)
    parts = [("thread", thread), ("stall", idle("unattributed_ms")), ("host", idle("host_bound_ms")),
             ("runtime", idle("runtime_ms")), ("data", idle("dataloader_ms")), ("compute", lambda r: r.compute_ms)]
    excess = {name: fn(rank) - _peer_median(peers, fn) for name, fn in parts}
    name, ms = max(excess.items(), key=lambda kv: kv[1])
    r = rank.rank
    if ms < CAUSE_SHARE * wait_ms or ms <= 0:
        return (f"its own timeline does not show why (compute, host ops and device idle within "
                f"{fmt(CAUSE_SHARE * wait_ms, 'ms')} of its peers')",
                f"find what delays rank {r} before the collectives it is last at (`llmdiag analyze --timeline`): "
                "work outside the profiled ops, or a capture that covers less of its step")
    more = f"{fmt(ms, 'ms')} per step more than its peers' median"
    if name == "thread":
        st = rank.comm_host_stall
        also = (f"; then `{st.next_op}` on `{st.next_thread}`, {fmt(st.next_ms_per_step, 'ms')} per step"
                if st.next_op else "")
        two = bool(st.next_op) and st.next_thread != st.thread  # e.g. the forward's main thread, the backward's
        who = (f"its host threads `{st.thread}` and `{st.next_thread}` stall" if two else
               f"its host thread `{st.thread}` stalls")
        where = (f"thread `{st.thread}` does inside `{st.op}`"
                 + (f" and thread `{st.next_thread}` in `{st.next_op}`" if two else ""))
        return (f"{who} with no profiled event inside or just before the ops that "
                f"launch its collectives, {more} (most in `{st.op}`, {fmt(st.op_ms_per_step, 'ms')} per step"
                f"{also}): it "
                "launches them late; its device may run queued work meanwhile, so its device idle need not show it",
                f"find what rank {r}'s {where} (`py-spy dump --pid` during the "
                "step: the GIL held by another thread, a lock, a host-side wait, garbage collection); no compute or "
                "layout change helps")
    if name == "stall":
        return (f"its GPU idles with no profiled host op running, {more} (a host stall outside the profiled ops)",
                f"find what rank {r}'s process does outside the profiled ops (`py-spy dump --pid`, a sleep, a barrier, "
                "I/O, garbage collection); no compute or layout change helps")
    if name == "host":
        return (f"its host runs ops with no kernel in flight, {more}",
                f"look at rank {r}'s host ops before the collectives it is last at (`llmdiag analyze --timeline`)")
    if name == "runtime":
        ops = sorted((rank.idle.runtime_ops or {}).items(), key=lambda kv: -kv[1])[:3]
        named = ", ".join(f"`{k}`" for k, _ in ops) or "runtime calls"
        return (f"its GPU idles in blocking runtime calls ({named}), {more}",
                f"remove the blocking calls on rank {r} (allocator: keep the caching allocator on, no "
                "`empty_cache()`; no `.item()` / synchronize in the step)")
    if name == "data":
        return (f"its host waits in the DataLoader, {more}",
                f"feed rank {r} faster (`num_workers`, `pin_memory=True`, prefetch)")
    heavy = _heavier_kernels(rank, peers)
    parts = [f"`{k}` +" + fmt(v, "ms") for k, v in heavy]
    named = f" (most in {', '.join(parts)})" if parts else ""
    return (f"it computes {more}{named}",
            f"look for uneven work (data, sequence lengths, layer split) on rank {r}")


def _heavier_kernels(rank, peers, n: int = 3) -> list[tuple[str, float]]:
    """The compute kernels whose time per step on the straggler most exceeds its peers' median (top-K lists)."""
    def per_step(r):
        return {k.name: k.total_ms / r.nsteps for k in r.top_kernels if k.kind == "compute" and r.nsteps}

    mine, theirs = per_step(rank), [per_step(p) for p in peers]
    excess = {k: v - _median([t.get(k, 0.0) for t in theirs]) for k, v in mine.items()}
    return sorted(((k, v) for k, v in excess.items() if v > 0), key=lambda kv: -kv[1])[:n]


def _median(vals: list[float]) -> float:
    vals = sorted(vals)
    return vals[len(vals) // 2] if vals else 0.0
