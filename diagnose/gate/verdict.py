"""Regression gates: which numbers of an Analysis are gated (limits read in gate/limits.py), and the verdict.

Both sides are typed `Analysis` objects that went through the same JSON round trip (gate/sides.py), so a
check gives the same answer from a summary file as from the run folder it came from. A gate on an undefined
value (None: no communication, no pipeline) is "n/a" rather than a silent pass or a spurious failure; the
caller decides with `strict` whether n/a fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmdiag.diagnose.errors import printable
from llmdiag.diagnose.gate.settings import run_differences
from llmdiag.diagnose.gate.inputs import InputCheck, apply_allow, partial_checks, side_checks, undefined_check
from llmdiag.diagnose.gate.limits import (ALIASES, METRICS, RELATIVE_RULES, RULES, Limit, Metric,  # noqa: F401 (re-exported)
                                  metric_named, parse_limit)
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import fmt, ranges

VERDICT_SCHEMA = 1
AGGS = ("worst", "min", "max", "mean", "rank")
EPS = 1e-12  # a value exactly at its limit passes, whatever the float rounding


@dataclass(frozen=True)
class Gate:
    metric: str
    rule: str  # max_rise, max_drop (against the baseline), min, max (absolute)
    limit: Limit
    agg: str = "worst"
    source: str = "flag"  # "flag", "config" or "default"

    @property
    def relative(self) -> bool:
        return self.rule in RELATIVE_RULES


DEFAULT_GATES = (
    ("overlap_ratio", "max_drop", 0.05),
    ("exposed_comm", "max_rise", 0.05),
    ("bubble", "max_rise", 0.05),
    ("step_time", "max_rise", "10%"),
    ("memory_peak", "max_rise", "10%"),
)


# On CPU traces (gloo on a shared CI runner) timings are noisy: over 10 repeats of the project's own dp2 run on a
# shared 2-core machine the mean exposed comm rose by up to 0.14 and the mean overlap dropped by up to 0.21 against
# baselines/dp2-cpu.json, step time varied 64-228 ms (docs/ci.md, "Default gates"). The memory peak is exact.
CPU_DEFAULT_GATES = (
    ("overlap_ratio", "max_drop", 0.35),
    ("exposed_comm", "max_rise", 0.25),
    ("bubble", "max_rise", 0.15),
    ("step_time", "max_rise", "500%"),
    ("memory_peak", "max_rise", "10%"),
)


def default_gates(agg: str | None = None, cpu: bool = False) -> list[Gate]:
    """What `check --baseline` gates when no flag or config names a gate: on CPU traces wider limits on the mean
    over ranks (`agg` replaces the aggregation)."""
    table, agg = (CPU_DEFAULT_GATES, agg or "mean") if cpu else (DEFAULT_GATES, agg or "worst")
    return [Gate(n, r, parse_limit(v, METRICS[n], r), agg, "default") for n, r, v in table]


# --- metric extraction -------------------------------------------------------------------------



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
    stage): keyed by rank, never by stage number alone, so every replica's stages are gated."""
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
    for k, (lab, v) in u.items():
        if v is not None:
            by.setdefault(rep.get(k, 0), []).append((lab, v))
    each = [(_combine(vs, metric, agg), k) for k, vs in sorted(by.items())]
    (v, lab), k = (min if metric.higher_is_better else max)(each, key=lambda t: t[0][0])
    return v, lab or (f"replica {k}" if len(each) > 1 else None)


# --- evaluation --------------------------------------------------------------------------------

@dataclass
class GateResult:
    metric: str
    title: str
    unit: str
    rule: str
    agg: str
    limit: str  # e.g. "max_drop 0.05", "max_rise 10%", "min 0.6"
    threshold: float | None  # the value the current side was held to, in the metric's unit
    baseline: float | None
    current: float | None
    delta: float | None  # current − baseline
    status: str  # "pass", "fail" or "n/a"
    worst: str | None  # the rank or stage that decided it
    message: str
    source: str = "flag"


@dataclass(frozen=True)
class Side:
    """What the verdict (and the diff) says about one input, besides its numbers."""

    label: str
    source: str
    world_size: int
    ranks: int  # ranks analysed
    trace_kind: str
    ranks_missing: list[int]
    layout: dict[str, int] | None


@dataclass
class Verdict:
    status: str  # "pass" or "fail"
    strict: bool
    current: Side
    baseline: Side | None
    aggregate_only: bool  # world sizes (or rank sets) differ: per-rank matching was not possible
    results: list[GateResult]
    notes: list[str] = field(default_factory=list)
    inputs: list[InputCheck] = field(default_factory=list)  # reasons not to trust a side (gate/inputs.py)
    schema_version: int = VERDICT_SCHEMA

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "pass" else 1

    def failed(self) -> list[GateResult]:
        return [r for r in self.results if r.status == "fail" or (self.strict and r.status == "n/a")]

    def failed_inputs(self) -> list[InputCheck]:
        return [c for c in self.inputs if c.fails]


def describe(a: Analysis) -> Side:
    return Side(label=printable(a.name or a.source or "?"), source=printable(a.source), world_size=world_size(a),
                ranks=len(a.ranks), trace_kind=a.trace_kind, ranks_missing=list(a.ranks_missing), layout=a.layout)


def world_size(a: Analysis) -> int:
    return a.world_size if a.world_size and a.world_size > 0 else len(a.ranks)


def _allowed(gate: Gate, base: float) -> float | None:
    if not gate.limit.relative:
        return gate.limit.value
    return None if base == 0 else gate.limit.value * abs(base)


def _bad(gate: Gate, base: float, cur: float) -> float:
    """How far current moved in the direction the rule forbids (positive = forbidden direction)."""
    return cur - base if gate.rule == "max_rise" else base - cur


def _why(m: Metric) -> str:
    return {"overlap_ratio": " (no communication)", "bubble": " (no pipeline)",
            "memory_peak": " (no [memory] events: profile with profile_memory=True)"}.get(m.name, "")


def shown(unit: str) -> str:
    """The unit a gate's value prints in: ratios as percent, as the report prints them."""
    return "pct" if unit == "ratio" else unit


def _moved(m: Metric, delta: float, base: float) -> str:
    """A change in words ("rose by 5.00 ms (5.0%)"), with its relative size where that means something."""
    word = "rose by " if delta > 0 else "dropped by " if delta < 0 else "unchanged, "
    rel = f" ({abs(delta) / abs(base) * 100:.1f}%)" if base and m.unit != "ratio" else ""
    amount = f"{abs(delta) * 100:.1f} pt" if m.unit == "ratio" else fmt(abs(delta), m.unit)
    return word + amount + rel


def _per_rank(gate: Gate, m: Metric, base: Analysis, cur: Analysis) -> tuple | None:
    """Each rank (stage) against its own baseline: (excess, label, baseline, current, allowed) of the worst."""
    b_u, c_u = units(base, m), units(cur, m)
    worst = None
    for k in sorted(b_u.keys() & c_u.keys()):
        (lab, b), (_, c) = b_u[k], c_u[k]
        if b is None or c is None or (allowed := _allowed(gate, b)) is None:
            continue
        excess = _bad(gate, b, c) - allowed
        if worst is None or excess > worst[0]:
            worst = (excess, lab, b, c, allowed)
    return worst


def _mover(gate: Gate, m: Metric, base: Analysis, cur: Analysis) -> str | None:
    """The rank (stage) that moved most in the forbidden direction, when ranks match."""
    cu = units(cur, m)
    moves = [(_bad(gate, b, cu[k][1]), lab) for k, (lab, b) in units(base, m).items()
             if b is not None and k in cu and cu[k][1] is not None]
    return max(moves, key=lambda t: t[0])[1] if moves else None


def _relative(gate: Gate, m: Metric, base: Analysis, cur: Analysis, matched: bool) -> GateResult:
    agg = gate.agg if (gate.agg != "rank" or matched) else "worst"
    r = GateResult(m.name, m.title, m.unit, gate.rule, agg, f"{gate.rule} {gate.limit.text}", None,
                   None, None, None, "n/a", None, "", gate.source)
    if agg == "rank":
        worst = _per_rank(gate, m, base, cur)
        if worst is None:  # the sides' values say which one lacks it (gate/inputs.py fails that side)
            r.baseline, r.current = aggregate(base, m, "worst")[0], aggregate(cur, m, "worst")[0]
            r.message = f"{m.name} is undefined on every matched rank, or its baseline is 0 there"
            return r
        _, r.worst, r.baseline, r.current, allowed = worst
    else:
        r.baseline, _ = aggregate(base, m, agg)
        r.current, r.worst = aggregate(cur, m, agg)
        if r.baseline is None or r.current is None:
            side = "both sides" if r.baseline is None and r.current is None else (
                "the baseline" if r.baseline is None else "the current run")
            r.message = f"{m.name} is undefined in {side}{_why(m)}"
            return r
        allowed = _allowed(gate, r.baseline)
        if allowed is None:
            r.delta = r.current - r.baseline
            r.message = f"baseline {m.name} is 0, so a relative limit is undefined (use an absolute one)"
            return r
        if matched:
            r.worst = _mover(gate, m, base, cur) or r.worst
    r.delta = r.current - r.baseline
    r.threshold = r.baseline + (allowed if gate.rule == "max_rise" else -allowed)
    fail = _bad(gate, r.baseline, r.current) > allowed + EPS * max(1.0, abs(r.baseline))
    r.status = "fail" if fail else "pass"
    r.message = (f"{m.name} ({agg}) {_moved(m, r.delta, r.baseline)}: "
                 f"{fmt(r.baseline, shown(m.unit))} -> {fmt(r.current, shown(m.unit))}, "
                 f"limit {r.limit}" + (f", worst {r.worst}" if r.worst else ""))
    return r


def _absolute(gate: Gate, m: Metric, base: Analysis | None, cur: Analysis) -> GateResult:
    agg = "worst" if gate.agg == "rank" else gate.agg
    r = GateResult(m.name, m.title, m.unit, gate.rule, agg, f"{gate.rule} {gate.limit.text}",
                   gate.limit.value, None, None, None, "n/a", None, "", gate.source)
    r.current, r.worst = aggregate(cur, m, agg)
    if base is not None:
        r.baseline, _ = aggregate(base, m, agg)
        if r.baseline is not None and r.current is not None:
            r.delta = r.current - r.baseline
    if r.current is None:
        r.message = f"{m.name} is undefined in the current run{_why(m)}"
        return r
    lim = gate.limit.value
    fail = r.current < lim - EPS if gate.rule == "min" else r.current > lim + EPS * max(1.0, lim)
    r.status = "fail" if fail else "pass"
    word = "below" if fail and gate.rule == "min" else "above" if fail else "within"
    r.message = (f"{m.name} ({agg}) {fmt(r.current, shown(m.unit))} is {word} the limit "
                 f"{r.limit}" + (f", worst {r.worst}" if r.worst else ""))
    return r


def _side_notes(current: Analysis, baseline: Analysis) -> tuple[bool, list[str]]:
    """(ranks match one to one, notes on what differs between the sides)."""
    notes = []
    wb, wc = world_size(baseline), world_size(current)
    rb, rc = {r.rank for r in baseline.ranks}, {r.rank for r in current.ranks}
    matched = wb == wc and rb == rc
    if wb != wc:
        notes.append(f"world sizes differ (baseline {wb}, current {wc}): compared aggregates over "
                     "ranks, not rank by rank")
    elif rb != rc:
        notes.append(f"ranks differ (only in baseline: {ranges(sorted(rb - rc)) or '-'}, only in current: "
                     f"{ranges(sorted(rc - rb)) or '-'}): compared aggregates over the ranks each side has")
    kb, kc = baseline.trace_kind, current.trace_kind
    if kb and kc and kb != kc:
        notes.append(f"trace kinds differ (baseline {kb}, current {kc}): numbers may not be comparable")
    runs = run_differences(baseline, current)
    if runs:
        notes.append("the runs were made differently (A baseline, B current): " + "; ".join(runs[:6])
                     + (f"; {len(runs) - 6} more" if len(runs) > 6 else "") + " (a difference may be the change "
                     "itself, or make the comparison meaningless)")
    return matched, notes


def evaluate(current: Analysis, baseline: Analysis | None, gates: list[Gate], strict: bool = False,
             allow: frozenset[str] | set[str] = frozenset()) -> Verdict:
    """Apply the gates; relative gates need a baseline (the caller checks that first). The inputs are checked
    too and fail the verdict (gate/inputs.py) unless their reason is in `allow`."""
    matched, notes = _side_notes(current, baseline) if baseline is not None else (True, [])
    inputs = side_checks(current, "current") + (side_checks(baseline, "baseline") if baseline is not None else [])
    results = []
    for g in gates:
        m = metric_named(g.metric)
        sides = [s for s in (baseline, current) if s is not None]
        if g.source == "default" and all(aggregate(s, m, "mean")[0] is None for s in sides):
            notes.append(f"{m.name}: not gated by default (undefined on both sides)")
            continue
        results.append(_relative(g, m, baseline, current, matched) if g.relative
                       else _absolute(g, m, baseline, current))
    inputs += [c for r in results if (c := undefined_check(r, baseline is not None, strict)) is not None]
    same_world = baseline is not None and world_size(baseline) == world_size(current)
    for name in dict.fromkeys(r.metric for r in results):  # once per metric, however many gates it has
        m, mine = METRICS[name], [r for r in results if r.metric == name]
        rel = [r for r in mine if r.rule in RELATIVE_RULES]  # only these read the baseline's values
        inputs += partial_checks((rel or mine)[0], m.per, units(baseline, m) if rel else None, units(current, m),
                                 same_world)
    v = Verdict("pass", strict, describe(current), describe(baseline) if baseline is not None else None,
                not matched, results, notes, apply_allow(inputs, set(allow)))
    v.status = "fail" if v.failed() or v.failed_inputs() else "pass"
    return v
