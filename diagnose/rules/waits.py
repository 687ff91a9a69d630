"""Where a straggler's peers wait, worded for its finding: the collective kinds and process groups whose
matched instances carry the arrival skew, how often the straggler was last there, and every late rank with
its mean lateness. Read from SkewResult (metrics/skew.py); nothing is recomputed here."""

from __future__ import annotations

from diagnose.model.analysis import SkewResult
from diagnose.model.format import fmt

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
