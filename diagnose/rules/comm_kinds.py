"""The exposed-communication rules' gate per collective kind, and the words for the waits taken out of an exposure
(rules/comm.py's _exposed_comm_rule).

Why per kind: a duration-weighted overlap ratio pooled over kinds is lifted by a long collective hidden under
compute (a DDP all-reduce under backward), so an all_to_all nothing overlaps, exposed on every step, reads as
"71 % overlapped" (hta/trace_diff test.json: all_to_all 53 %, all-reduce 99 %). Judged on its own ratio it is
what it is; a kind mostly hidden (≥ 70 %) stays silent whatever its absolute exposure, as the pooled gate did."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass  # its __init__ compiled once per user (model/code_cache.py)

from llmdiag.diagnose.model.format import fmt, ranges

OVERLAP_GATE = 0.70  # a kind this much overlapped is already scheduled beside compute: no finding for it
EXPOSED_SHARE = 0.05  # ... and a kind under this share of the step exposed is not worth one


@dataclass(frozen=True)
class KindExposure:
    """One (kind, process group) over the rule's rows: its overlap ratio and its mean exposed ms per step."""

    kind: str
    pg: str
    ratio: float | None
    exposed_ms: float


def kind_exposures(rows: list) -> list[KindExposure]:
    """Per (kind, pg), most exposed first: Σ overlapped / Σ total over the rows' ranks (per step), and the mean over
    those ranks of (total − overlapped) per step. Rows are (rank, total, exposed, collectives) as comm.py builds."""
    per: dict[tuple[str, str], list[float]] = {}
    for r, _, _, cs in rows:
        for cc in cs:
            t = per.setdefault((cc.kind, cc.pg), [0.0, 0.0])
            t[0] += cc.total_ms / r.nsteps
            t[1] += cc.overlapped_ms / r.nsteps
    n = max(1, len(rows))
    out = [KindExposure(k, pg, ov / tot if tot else None, max(0.0, tot - ov) / n) for (k, pg), (tot, ov) in per.items()]
    return sorted(out, key=lambda x: -x.exposed_ms)


def open_kinds(rows: list, step: float) -> list[KindExposure]:
    """The kinds under the overlap gate whose own exposure is at least EXPOSED_SHARE of the step."""
    return [x for x in kind_exposures(rows)
            if x.ratio is not None and x.ratio < OVERLAP_GATE and x.exposed_ms >= EXPOSED_SHARE * step]


def open_words(opened: list[KindExposure], rows: list, pooled: float) -> str:
    """Why a finding fires though the pooled ratio passes the gate: the open kinds and the hidden ones."""
    hidden = [x for x in kind_exposures(rows) if x not in opened and x.ratio is not None and x.ratio >= OVERLAP_GATE]
    name = lambda x: f"{x.kind} on pg '{x.pg}'" if x.pg else x.kind
    words = "; ".join(f"{name(x)} alone: overlap ratio {fmt(x.ratio, 'pct')}, exposed {fmt(x.exposed_ms, 'ms')} per "
                      "step" for x in opened)
    lift = ", ".join(f"{name(x)} {fmt(x.ratio, 'pct')}" for x in hidden[:3])
    return (f"; {words} (the pooled {fmt(pooled, 'pct')} is lifted by collectives hidden under compute"
            + (f": {lift}" if lift else "") + ")")


def wait_words(rank: int, exposed: float, wait: float, late: list[int]) -> str:
    """The whole exposure and the part of it taken out as waiting for peers at matched collectives (the exposed
    part of the waits: skew.wait_exposed_ms_by_rank), so the net number is never read as the rank's whole exposure. `late`: the ranks a straggler finding names."""
    if wait <= 0:
        return ""
    if rank in late:
        whom = ("peers arriving after it at some matched collectives (not the straggler's imposed wait: overlap "
                "does not shorten a wait for a later peer)")
    elif late:
        whom = f"later peers at matched collectives, straggler rank(s) {ranges(late)} among them (see `stragglers`)"
    else:
        whom = "later peers at matched collectives"
    return (f"; rank {rank} is exposed {fmt(exposed, 'ms')} per step in all, of which {fmt(wait, 'ms')} is waiting "
            f"for {whom} with no compute under it: taken out above")
