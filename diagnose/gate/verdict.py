"""Regression gates: which numbers of an Analysis are gated (limits read in gate/limits.py), and the verdict.

Both sides are typed `Analysis` objects that went through the same JSON round trip (gate/sides.py), so a
check gives the same answer from a summary file as from the run folder it came from. A gate on an undefined
value (None: no communication, no pipeline) is "n/a" rather than a silent pass or a spurious failure; the
caller decides with `strict` whether n/a fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmdiag.diagnose.errors import printable
from llmdiag.diagnose.gate.settings import run_differences
from llmdiag.diagnose.gate.inputs import InputCheck, apply_allow, partial_checks, side_checks, undefined_check
from llmdiag.diagnose.gate.limits import (ALIASES, GATED, METRICS, RELATIVE_RULES, RULES, Limit, Metric,  # noqa: F401 (re-exported)
                                  PathMetric, metric_named, parse_limit)
from llmdiag.diagnose.gate.noise import sigma
from llmdiag.diagnose.gate.path import not_compared, sought
from llmdiag.diagnose.gate.values import aggregate, once, replicas, units  # noqa: F401 (re-exported)
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.codec import no_gc
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


# The job's critical path (GPU traces): a split that moved off compute, to communication, the host, launches or
# gaps between kernels, by more than 5 points beyond the steps' own spread (1σ, gate/noise.py; σ at least 1 point).
# Its length is the step time's, gated above. The compute share's drop is the others' rise seen from compute: a
# move spread over the four costs shows there even where none of them passes its limit alone.
PATH_SHARE_LIMIT = "0.05+1σ"
DEFAULT_GATES = (
    ("overlap_ratio", "max_drop", 0.05),
    ("exposed_comm", "max_rise", 0.05),
    ("bubble", "max_rise", 0.05),
    ("step_time", "max_rise", "10%"),
    ("memory_peak", "max_rise", "10%"),
    ("path_compute", "max_drop", PATH_SHARE_LIMIT),
    ("path_comm", "max_rise", PATH_SHARE_LIMIT),
    ("path_cpu", "max_rise", PATH_SHARE_LIMIT),
    ("path_launch", "max_rise", PATH_SHARE_LIMIT),
    ("path_kernel_gap", "max_rise", PATH_SHARE_LIMIT),
)


# On CPU traces (gloo on a shared CI runner) timings are noisy, and by different amounts on different machines: the
# limits are measured from the baseline's own noise (gate/noise.py), on the worst rank (a slow rank makes the others
# wait: their overlap drops and exposed comm rises, while the mean over ranks hides it). Over 10 repeats of the
# project's dp2 run on a shared 2-core machine, 1.5σ passed every repeat and failed every 2x slower rank
# (docs/ci.md, "Measured"). Step time moved 4x between runs with the machine's load, which one baseline run cannot
# show: it is gated only where repeated baseline runs measure that spread (`--noise-from`). The memory peak is exact.
CPU_DEFAULT_GATES = (
    ("overlap_ratio", "max_drop", "1.5σ"),
    ("exposed_comm", "max_rise", "1.5σ"),
    ("bubble", "max_rise", "1.5σ"),
    ("memory_peak", "max_rise", "10%"),
)
CPU_REPEATS_GATES = (("step_time", "max_rise", "3σ"),)


def default_gates(agg: str | None = None, cpu: bool = False, repeats: bool = False) -> list[Gate]:
    """What `check --baseline` gates when no flag or config names a gate: on CPU traces limits in the baseline's
    measured noise, on the worst rank (`agg` replaces the aggregation); step time there only with `repeats`."""
    table, agg = (CPU_DEFAULT_GATES + CPU_REPEATS_GATES * repeats, agg or "worst") if cpu else (
        DEFAULT_GATES, agg or "worst")
    return [Gate(n, r, parse_limit(v, GATED[n], r), agg, "default") for n, r, v in table]


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


def _allowed(gate: Gate, base: float, sig: float | None = None) -> float | None:
    """How far the value may move in the forbidden direction; None where a relative limit has no meaning."""
    if gate.limit.noise:
        return None if sig is None else gate.limit.value * sig
    own = gate.limit.value if not gate.limit.relative else None if base == 0 else gate.limit.value * abs(base)
    if own is None or not gate.limit.plus_sigma:
        return own
    return None if sig is None else own + gate.limit.plus_sigma * sig


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


def _amount(m: Metric, x: float) -> str:
    return f"{x * 100:.1f} pt" if m.unit == "ratio" else fmt(x, m.unit)


def _per_rank(gate: Gate, m: Metric, base: Analysis, cur: Analysis, sig: float | None = None) -> tuple | None:
    """Each rank (pipeline rank) against its own baseline: (excess, label, baseline, current, allowed) of the worst.
    A unit only the current run has (a pipeline replica the baseline lacks) is held to the baseline's worst value:
    unmatched is no reason to go ungated."""
    b_u, c_u = units(base, m), units(cur, m)
    fallback = aggregate(base, m, "worst")[0]
    worst = None
    for k in sorted(c_u.keys()):
        (_, c) = c_u[k]
        lab, b = (b_u[k][0], b_u[k][1]) if k in b_u else (c_u[k][0] + " (not in the baseline)", fallback)
        if b is None or c is None or (allowed := _allowed(gate, b, sig)) is None:
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


def _relative(gate: Gate, m: Metric, base: Analysis, cur: Analysis, matched: bool,
              repeats: list[Analysis] | tuple = ()) -> GateResult:
    agg = gate.agg if (gate.agg != "rank" or matched) else "worst"
    r = GateResult(m.name, m.title, m.unit, gate.rule, agg, f"{gate.rule} {gate.limit.text}", None,
                   None, None, None, "n/a", None, "", gate.source)
    noisy = gate.limit.noise or gate.limit.plus_sigma
    sig = sigma(base, m, "worst" if agg == "rank" else agg, repeats) if noisy else None
    if sig is not None and (gate.limit.noise or not gate.limit.relative):
        r.limit += f" = {_amount(m, gate.limit.value * sig if gate.limit.noise else gate.limit.value + gate.limit.plus_sigma * sig)}"
    if agg == "rank":
        worst = _per_rank(gate, m, base, cur, sig)
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
        allowed = _allowed(gate, r.baseline, sig)
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


def _unstated(gate: Gate, m: Metric, why: str) -> GateResult:
    """A path gate one side cannot be read for: n/a, with the summary's reason (`--strict` fails it)."""
    return GateResult(m.name, m.title, m.unit, gate.rule, gate.agg, f"{gate.rule} {gate.limit.text}", None, None,
                      None, None, "n/a", None, f"{m.name}: {why}", gate.source)


def _side_notes(current: Analysis, baseline: Analysis, run_defaults: dict | None = None) -> tuple[bool, list[str]]:
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
    runs = run_differences(baseline, current, run_defaults)
    if runs:
        notes.append("the runs were made differently (A baseline, B current): " + "; ".join(runs[:6])
                     + (f"; {len(runs) - 6} more" if len(runs) > 6 else "") + " (a difference may be the change "
                     "itself, or make the comparison meaningless)")
    return matched, notes


def evaluate(current: Analysis, baseline: Analysis | None, gates: list[Gate], strict: bool = False,
             allow: frozenset[str] | set[str] = frozenset(), repeats: list[Analysis] | tuple = (),
             run_defaults: dict | None = None) -> Verdict:
    """Apply the gates; relative gates need a baseline (the caller checks that first). The inputs are checked
    too and fail the verdict (gate/inputs.py) unless their reason is in `allow`. `repeats`: repeated baseline
    runs, whose run-to-run spread is part of a σ limit's noise (gate/noise.py). `run_defaults`: `llmdiag run`'s
    option defaults, for options a side's manifest predates (gate/settings.py).

    Each side's per-rank values are computed once (`once`), with the cyclic collector off: the verdict's
    records hold no cycles, and a full collection would rescan both sides (~10^6 objects at 16,384 ranks)."""
    with once(), no_gc():
        return _evaluate(current, baseline, gates, strict, allow, repeats, run_defaults)


def _evaluate(current: Analysis, baseline: Analysis | None, gates: list[Gate], strict: bool,
              allow: frozenset[str] | set[str], repeats: list[Analysis] | tuple, run_defaults: dict | None) -> Verdict:
    matched, notes = _side_notes(current, baseline, run_defaults) if baseline is not None else (True, [])
    inputs = side_checks(current, "current") + (side_checks(baseline, "baseline") if baseline is not None else [])
    results = []
    for g in gates:
        m = metric_named(g.metric)
        sides = [s for s in (baseline, current) if s is not None]
        if g.source == "default" and isinstance(m, PathMetric) and not any(map(sought, sides)):
            continue  # CPU traces: no path was sought, so none is missing
        if g.source == "default" and all(aggregate(s, m, "mean")[0] is None for s in sides) and not (
                isinstance(m, PathMetric) and any(map(sought, sides))):
            notes.append(f"{m.name}: not gated by default (undefined on both sides)")
            continue
        if isinstance(m, PathMetric) and (why := not_compared(baseline, current, m)):
            results.append(_unstated(g, m, why))
            continue
        results.append(_relative(g, m, baseline, current, matched, repeats) if g.relative
                       else _absolute(g, m, baseline, current))
    # a path is null on purpose (gate/path.py): its n/a says why, it is not a metric that vanished
    judged = [r for r in results if not isinstance(GATED[r.metric], PathMetric)]
    inputs += [c for r in judged if (c := undefined_check(r, baseline is not None, strict)) is not None]
    same_world = baseline is not None and world_size(baseline) == world_size(current)
    for name in dict.fromkeys(r.metric for r in judged):  # once per metric, however many gates it has
        m, mine = GATED[name], [r for r in results if r.metric == name]
        rel = [r for r in mine if r.rule in RELATIVE_RULES]  # only these read the baseline's values
        inputs += partial_checks((rel or mine)[0], m.per, units(baseline, m) if rel else None, units(current, m),
                                 same_world)
    v = Verdict("pass", strict, describe(current), describe(baseline) if baseline is not None else None,
                not matched, results, notes, apply_allow(inputs, set(allow)))
    v.status = "fail" if v.failed() or v.failed_inputs() else "pass"
    return v
