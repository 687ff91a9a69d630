"""The gated values of one side: per rank (per pipeline rank for bubbles) and aggregated over ranks."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from llmdiag.diagnose.gate.limits import Metric, PathMetric
from llmdiag.diagnose.gate.path import path_units
from llmdiag.diagnose.model.analysis import Analysis

# (id of the side, metric) -> (the side, its units) while a `once()` block runs; the side is held so its id is
# not reused within the block
_memo: dict[tuple[int, Metric], tuple[Analysis, dict]] | None = None


@contextmanager
def once() -> Iterator[None]:
    """Inside the block, `units` of a side and metric is computed once: a check or diff asks for the same values
    up to ten times (aggregates, the worst mover, the partial checks, the noise), and a rank's memory peak is a
    max over its devices each time. The sides must not change inside the block; nested blocks share the outer."""
    global _memo
    if _memo is not None:
        yield
        return
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def _float(v) -> float | None:
    """None for an undefined value; NaN or infinity (never written by llmdiag) is undefined too, never a number
    that compares false against every limit."""
    return None if v is None or not math.isfinite(v) else float(v)


def replicas(a: Analysis) -> dict[int, int]:
    """Pipeline rank -> its replica (0-based): the pipeline's rank groups in order, else (a summary without them)
    the order of the ranks that run the same stage. With dp2 x pp2 each stage has two rows, one per replica."""
    bubbles = a.pipeline.stage_bubbles if a.pipeline else []
    of = {r: k for k, g in enumerate(a.pipeline.groups if a.pipeline else []) for r in g}
    if all(b.rank in of for b in bubbles):
        return {b.rank: of[b.rank] for b in bubbles}
    seen: dict[int, int] = {}
    out = {}
    for b in sorted(bubbles, key=lambda b: (b.stage, b.rank)):
        out[b.rank] = seen.get(b.stage, 0)
        seen[b.stage] = out[b.rank] + 1
    return out


def units(a: Analysis, metric: Metric) -> dict[int, tuple[str, float | None]]:
    """Per-rank values: rank -> (label, value or None). Bubbles are per pipeline rank, that is per (replica,
    stage): keyed by rank, never by stage number alone, so every replica's stages are gated. Not to be changed
    by the caller (inside `once()` the same dict is returned again)."""
    memo = _memo  # read once: another thread's block may end meanwhile
    if memo is None:
        return _units(a, metric)
    key = (id(a), metric)
    hit = memo.get(key)
    if hit is None or hit[0] is not a:
        hit = memo[key] = (a, _units(a, metric))
    return hit[1]


def _units(a: Analysis, metric: Metric) -> dict[int, tuple[str, float | None]]:
    if isinstance(metric, PathMetric):
        return path_units(a, metric)
    if metric.per == "stage":
        bubbles = a.pipeline.stage_bubbles if a.pipeline else []
        rep = replicas(a)
        many = len(set(rep.values())) > 1
        return {b.rank: (f"{f'replica {rep[b.rank]} ' if many else ''}stage {b.stage} (rank {b.rank})",
                         _float(b.measured)) for b in bubbles}
    return {r.rank: (f"rank {r.rank}", _float(getattr(r, metric.key))) for r in a.ranks}


def _combine(vals: list[tuple[str, float]], metric: Metric, agg: str) -> tuple[float, str | None]:
    if agg == "mean":
        return sum(v for _, v in vals) / len(vals), None
    if agg in ("worst", "rank"):
        agg = "min" if metric.higher_is_better else "max"
    pick = min if agg == "min" else max
    lab, v = pick(vals, key=lambda t: t[1])
    return v, lab


def aggregate(a: Analysis, metric: Metric, agg: str) -> tuple[float | None, str | None]:
    """(value, label of the unit that gives it, if one does) over the defined values. A per-stage metric is
    aggregated over each pipeline replica's stages, and the worst replica gives the value: replicas are copies of
    one pipeline, and a gate holds for each (one replica's regressed stage is not averaged away by the others)."""
    u = units(a, metric)
    vals = [(lab, v) for lab, v in u.values() if v is not None]
    if not vals:
        if metric.per == "stage" and a.pipeline:  # a pipeline without per-stage rows still has its mean
            return _float(a.pipeline.measured), None
        return None, None
    if metric.per != "stage":
        return _combine(vals, metric, agg)
    rep = replicas(a)
    by: dict[int, list[tuple[str, float]]] = {}
    for key, (lab, v) in u.items():
        if v is not None:
            by.setdefault(rep.get(key, 0), []).append((lab, v))
    each = [(_combine(vs, metric, agg), k) for k, vs in sorted(by.items())]
    (value, label), k = (min if metric.higher_is_better else max)(each, key=lambda t: t[0][0])
    return value, label or (f"replica {k}" if len(each) > 1 else None)
