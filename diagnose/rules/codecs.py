"""Quantized communication: what its codec costs in device time, next to the all_to_all it shrinks."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, steps_where

MIN_SHARE = 0.01  # codec kernels below 1 % of the rank's compute get no finding


def comm_codec(c: Ctx) -> list[Finding]:
    """A quantized-comm codec (TorchRec `QCommsConfig`: `## encoder <precision> ##` / `## decoder ... ##` ranges)
    whose kernels take at least MIN_SHARE of compute: their device time per step (forward only, a lower bound),
    next to the all_to_all kernel time it shrinks. What the codec saves is not in the trace (the bytes an
    unquantized all_to_all would send, and its time, are not recorded): no gain is claimed, the finding says what
    to compare."""
    rows = []
    for r in c.ranks:
        cc = r.comm_codec
        cost = (cc.encode_ms_per_step + cc.decode_ms_per_step) if cc is not None else 0.0
        if cc is not None and cost > 0 and r.compute_ms and cost >= MIN_SHARE * r.compute_ms:
            a2a = sum(cs.total_ms for cs in r.comm_by_kind if cs.kind == "alltoall") / r.nsteps
            rows.append((r, cost, a2a))
    if not rows:
        return []
    r, cost, a2a = max(rows, key=lambda x: x[1])
    cc = r.comm_codec
    assert cc is not None
    mean = statistics.fmean(x[1] for x in rows)
    lo, hi = min(x[2] for x in rows), max(x[2] for x in rows)
    ev = (f"rank {r.rank}: the {cc.precision} codec of its quantized communication launches "
          f"{fmt(cc.encode_ms_per_step, 'ms')} of encode and {fmt(cc.decode_ms_per_step, 'ms')} of decode kernels per "
          f"step ({fmt(cost / r.compute_ms, 'pct')} of its {fmt(r.compute_ms, 'ms')} compute; "
          f"{fmt(cc.calls_per_step, 'avg')} `## encoder`/`## decoder` ranges per step), mean {fmt(mean, 'ms')} over "
          f"{plural(len(rows), 'rank')}; forward only: the codec's backward (the casts' and clamps' gradients) runs "
          f"unannotated and is not counted. The all_to_all kernels (the codec shrinks those it encodes for) take {fmt(lo, 'ms')}"
          + (f"–{fmt(hi, 'ms')}" if hi > lo else "") + " per step on those ranks (waits for peers included)")
    act = ("keep the codec only where the all_to_all time it saves exceeds its cost: profile the same job with "
           "`qcomms_config=None` (or the other precision) and compare the steps (`llmdiag diff`); the codec pays "
           "where the all_to_all is bandwidth-bound, not where it waits for a late rank")
    eg = ("not quantified: the trace holds the codec's cost (at least the "
          f"{fmt(mean, 'ms')} per step above), not the all_to_all time an unquantized exchange would take")
    return [c.finding("comm_codec", "low", "Quantized communication: codec cost", ev, [x[0].rank for x in rows],
                      steps_where([r]), act, eg, None, "ranks[].comm_codec", gain_kind="estimate",
                      events=["`## encoder` / `## decoder` user annotations", "kernels launched inside them",
                              "all_to_all kernels"])]
