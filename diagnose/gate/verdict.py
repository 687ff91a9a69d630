"""Regression gates: which numbers of a summary are gated, how limits read, and the verdict.

Everything here works on the plain dict of `Analysis.to_dict()` (a summary file or a fresh analysis), so a
check gives the same answer from a JSON file as from the run folder it came from. A gate on an undefined
value (None: no communication, no pipeline) is "n/a" rather than a silent pass or a spurious failure; the
caller decides with `strict` whether n/a fails.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from diagnose.errors import LlmdiagError, printable

VERDICT_SCHEMA = 1
AGGS = ("worst", "min", "max", "mean", "rank")
RULES = ("max_rise", "max_drop", "min", "max")
RELATIVE_RULES = ("max_rise", "max_drop")
EPS = 1e-12  # a value exactly at its limit passes, whatever the float rounding


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    unit: str  # "ratio", "ms" or "bytes"
    higher_is_better: bool
    per: str = "rank"  # "rank", or "stage" for pipeline bubbles


METRICS = {
    m.name: m
    for m in (
        Metric("overlap_ratio", "comm/compute overlap", "ratio", True),
        Metric("exposed_comm", "exposed comm / step time", "ratio", False),
        Metric("step_time", "step time", "ms", False),
        Metric("memory_peak", "memory peak (allocated)", "bytes", False),
        Metric("bubble", "pipeline bubble", "ratio", False, per="stage"),
    )
}
ALIASES = {
    "overlap": "overlap_ratio",
    "exposed_comm_frac": "exposed_comm",
    "step_time_ms": "step_time",
    "memory": "memory_peak",
    "memory_peak_allocated": "memory_peak",
    "pipeline_bubble": "bubble",
}


def metric_named(name: str, where: str | None = None) -> Metric:
    m = METRICS.get(ALIASES.get(name, name))
    if m is None:
        raise LlmdiagError(f"unknown metric {name!r}", where, f"use one of {', '.join(METRICS)}")
    return m


@dataclass(frozen=True)
class Limit:
    value: float  # in the metric's unit (ratio, ms, bytes), or a fraction of the baseline when relative
    relative: bool
    text: str  # as the user wrote it, for messages


_UNITS = {
    "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3,
    "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}
_LIMIT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%|[a-zA-Zµ]+)?\s*$")


def parse_limit(raw, metric: Metric, rule: str, where: str | None = None) -> Limit:
    """A number in the metric's unit, "10%" (of the baseline; rise/drop rules only), "5ms", "512MiB"."""
    bad = f"bad limit {rule} = {raw!r} for {metric.name}"
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise LlmdiagError(bad, where, "give a number, or a string such as \"10%\"")
    if isinstance(raw, str):
        m = _LIMIT_RE.match(raw)
        if not m:
            raise LlmdiagError(bad, where, "give a number, or a string such as \"10%\", \"5ms\", \"512MiB\"")
        num, unit = float(m.group(1)), (m.group(2) or "").lower()
        if unit == "%":
            if rule not in RELATIVE_RULES:
                raise LlmdiagError(bad, where, "a percentage is relative to the baseline: use it with max_rise/max_drop")
            return Limit(num / 100.0, True, raw.strip())
        if unit:
            ok = (metric.unit == "ms" and unit in ("ms", "s", "us", "µs")) or (
                metric.unit == "bytes" and unit in ("b", "kb", "mb", "gb", "kib", "mib", "gib"))
            if not ok:
                raise LlmdiagError(bad, where, f"{metric.name} is measured in {metric.unit}")
            num *= _UNITS[unit]
        return Limit(num, False, raw.strip())
    if not math.isfinite(raw) or raw < 0:
        raise LlmdiagError(bad, where, "limits are finite and >= 0")
    return Limit(float(raw), False, format(raw, "g"))


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


def default_gates(agg: str = "worst") -> list[Gate]:
    """What `check --baseline` gates when no flag or config names a gate."""
    return [Gate(n, r, parse_limit(v, METRICS[n], r), agg, "default") for n, r, v in DEFAULT_GATES]


# --- metric extraction -------------------------------------------------------------------------

def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def units(summary: dict, metric: Metric) -> dict[int, tuple[str, float | None]]:
    """Per-rank (or per-stage for bubbles) values: key -> (label, value or None)."""
    out: dict[int, tuple[str, float | None]] = {}
    if metric.per == "stage":
        pipe = summary.get("pipeline") or {}
        for sb in pipe.get("stage_bubbles") or []:
            out[sb["stage"]] = (f"stage {sb['stage']} (rank {sb.get('rank')})", _num(sb.get("measured")))
        return out
    for r in summary.get("ranks") or []:
        if metric.name == "memory_peak":
            peaks = [_num(m.get("peak_allocated")) for m in r.get("memory") or []]
            peaks = [p for p in peaks if p is not None]
            v = max(peaks) if peaks else None
        else:
            key = {"overlap_ratio": "overlap_ratio", "exposed_comm": "exposed_comm_frac",
                   "step_time": "step_time_ms"}[metric.name]
            v = _num(r.get(key))
        out[r["rank"]] = (f"rank {r['rank']}", v)
    return out


def _worse(metric: Metric, a: float, b: float) -> bool:
    return a < b if metric.higher_is_better else a > b


def aggregate(summary: dict, metric: Metric, agg: str) -> tuple[float | None, str | None]:
    """(value, label of the unit that gives it, if one does) over the defined values."""
    vals = [(lab, v) for lab, v in units(summary, metric).values() if v is not None]
    if not vals:
        if metric.per == "stage":  # a pipeline summary without per-stage rows still has its mean
            return _num((summary.get("pipeline") or {}).get("measured")), None
        return None, None
    if agg == "mean":
        return sum(v for _, v in vals) / len(vals), None
    if agg in ("worst", "rank"):
        agg = "min" if metric.higher_is_better else "max"
    pick = min if agg == "min" else max
    lab, v = pick(vals, key=lambda t: t[1])
    return v, lab


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


@dataclass
class Verdict:
    status: str  # "pass" or "fail"
    strict: bool
    current: dict  # {"label", "source", "world_size"}
    baseline: dict | None
    aggregate_only: bool  # world sizes (or rank sets) differ: per-rank matching was not possible
    results: list[GateResult]
    notes: list[str] = field(default_factory=list)
    schema_version: int = VERDICT_SCHEMA

    @property
    def exit_code(self) -> int:
        return 0 if self.status == "pass" else 1

    def failed(self) -> list[GateResult]:
        return [r for r in self.results if r.status == "fail" or (self.strict and r.status == "n/a")]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["exit_code"] = self.exit_code
        return d


def describe(summary: dict | None) -> dict | None:
    if summary is None:
        return None
    return {"label": printable(summary.get("name") or summary.get("source") or "?"),
            "source": printable(summary.get("source") or ""),
            "world_size": world_size(summary), "ranks": len(summary.get("ranks") or []),
            "trace_kind": summary.get("trace_kind")}


def world_size(summary: dict) -> int:
    ws = summary.get("world_size")
    return ws if isinstance(ws, int) and ws > 0 else len(summary.get("ranks") or [])


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


def _relative(gate: Gate, m: Metric, base_s: dict, cur_s: dict, matched: bool) -> GateResult:
    agg = gate.agg if (gate.agg != "rank" or matched) else "worst"
    r = GateResult(m.name, m.title, m.unit, gate.rule, agg, f"{gate.rule} {gate.limit.text}", None,
                   None, None, None, "n/a", None, "", gate.source)
    if agg == "rank":  # each rank against its own baseline; the worst excess decides
        b_u, c_u = units(base_s, m), units(cur_s, m)
        worst = None
        for k in sorted(b_u.keys() & c_u.keys()):
            (lab, b), (_, c) = b_u[k], c_u[k]
            if b is None or c is None or (allowed := _allowed(gate, b)) is None:
                continue
            excess = _bad(gate, b, c) - allowed
            if worst is None or excess > worst[0]:
                worst = (excess, lab, b, c, allowed)
        if worst is None:
            r.message = f"{m.name} is undefined on every matched rank"
            return r
        _, r.worst, r.baseline, r.current, allowed = worst
    else:
        r.baseline, _ = aggregate(base_s, m, agg)
        r.current, r.worst = aggregate(cur_s, m, agg)
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
    r.delta = r.current - r.baseline
    if agg != "rank" and matched:  # name the rank (stage) that moved most in the forbidden direction
        cu = units(cur_s, m)
        moves = [(_bad(gate, b, cu[k][1]), lab) for k, (lab, b) in units(base_s, m).items()
                 if b is not None and k in cu and cu[k][1] is not None]
        r.worst = max(moves, key=lambda t: t[0])[1] if moves else r.worst
    sign = 1 if gate.rule == "max_rise" else -1
    r.threshold = r.baseline + sign * allowed
    moved = ("rose by " if r.delta > 0 else "dropped by " if r.delta < 0 else "unchanged, ") + \
        fmt_value(m.unit, abs(r.delta)) + (f" ({abs(r.delta) / abs(r.baseline) * 100:.1f}%)"
                                           if r.baseline and m.unit != "ratio" else "")
    fail = _bad(gate, r.baseline, r.current) > allowed + EPS * max(1.0, abs(r.baseline))
    r.status = "fail" if fail else "pass"
    r.message = (f"{m.name} ({agg}) {moved}: "
                 f"{fmt_value(m.unit, r.baseline)} -> {fmt_value(m.unit, r.current)}, "
                 f"limit {r.limit}" + (f", worst {r.worst}" if r.worst else ""))
    return r


def _absolute(gate: Gate, m: Metric, base_s: dict | None, cur_s: dict) -> GateResult:
    agg = "worst" if gate.agg == "rank" else gate.agg
    r = GateResult(m.name, m.title, m.unit, gate.rule, agg, f"{gate.rule} {gate.limit.text}",
                   gate.limit.value, None, None, None, "n/a", None, "", gate.source)
    r.current, r.worst = aggregate(cur_s, m, agg)
    if base_s is not None:
        r.baseline, _ = aggregate(base_s, m, agg)
        if r.baseline is not None and r.current is not None:
            r.delta = r.current - r.baseline
    if r.current is None:
        r.message = f"{m.name} is undefined in the current run{_why(m)}"
        return r
    lim = gate.limit.value
    fail = r.current < lim - EPS if gate.rule == "min" else r.current > lim + EPS * max(1.0, lim)
    r.status = "fail" if fail else "pass"
    word = "below" if fail and gate.rule == "min" else "above" if fail else "within"
    r.message = (f"{m.name} ({agg}) {fmt_value(m.unit, r.current)} is {word} the limit "
                 f"{r.limit}" + (f", worst {r.worst}" if r.worst else ""))
    return r


def evaluate(current: dict, baseline: dict | None, gates: list[Gate], strict: bool = False) -> Verdict:
    """Apply the gates; relative gates need a baseline (the caller checks that first)."""
    notes: list[str] = []
    matched = True
    if baseline is not None:
        wb, wc = world_size(baseline), world_size(current)
        rb = {r["rank"] for r in baseline.get("ranks") or []}
        rc = {r["rank"] for r in current.get("ranks") or []}
        if wb != wc:
            matched = False
            notes.append(f"world sizes differ (baseline {wb}, current {wc}): compared aggregates over "
                         "ranks, not rank by rank")
        elif rb != rc:
            matched = False
            notes.append(f"ranks differ (only in baseline: {sorted(rb - rc) or '-'}, only in current: "
                         f"{sorted(rc - rb) or '-'}): compared aggregates over the ranks each side has")
        kb, kc = baseline.get("trace_kind"), current.get("trace_kind")
        if kb and kc and kb != kc:
            notes.append(f"trace kinds differ (baseline {kb}, current {kc}): numbers may not be comparable")
    missing = current.get("ranks_missing") or []
    if missing:
        notes.append(f"current run is missing ranks {missing}")
    results = []
    for g in gates:
        m = metric_named(g.metric)
        if g.source == "default" and all(aggregate(s, m, "mean")[0] is None for s in (baseline, current) if s):
            notes.append(f"{m.name}: not gated by default (undefined on both sides)")
            continue
        results.append(_relative(g, m, baseline, current, matched) if g.relative
                       else _absolute(g, m, baseline, current))
    v = Verdict("pass", strict, describe(current), describe(baseline), not matched, results, notes)
    v.status = "fail" if v.failed() else "pass"
    return v


# --- formatting shared by the table, JUnit and annotations ---------------------------------------

def _bytes(v: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= size:
            return f"{v / size:.2f} {unit}"
    return f"{v:.0f} B"


def fmt_value(unit: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    if unit == "ms":
        return f"{v:.2f} ms"
    if unit == "bytes":
        return _bytes(v)
    return f"{v:.3f}"


def fmt_delta(unit: str, d: float | None, base: float | None = None) -> str:
    if d is None:
        return "n/a"
    sign = "+" if d >= 0 else "-"
    body = fmt_value(unit, abs(d))
    rel = f" ({sign}{abs(d) / abs(base) * 100:.1f}%)" if base and unit != "ratio" else ""
    return f"{sign}{body}{rel}"
