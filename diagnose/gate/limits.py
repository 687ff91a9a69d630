"""The gated metrics and their limits: how a limit reads, and which values it may take.

A limit is validated against its metric's unit, in flags and config alike (docs/ci.md, "Limits"), because a
limit that can never be exceeded turns its gate off silently: a ratio (overlap, exposed comm, bubble) lies in
[0, 1], so its absolute limits and its rise/drop in points are in [0, 1] (written as percentages: 0-100 %);
a relative drop ("10%" of the baseline) is at most 100 %, since a value that cannot go below 0 cannot drop by
more than itself. A relative rise has no upper bound ("500%": six times the baseline is a real slowdown), and
times and sizes are only >= 0. Every limit is finite.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.fields import FIELDS

RULES = ("max_rise", "max_drop", "min", "max")
RELATIVE_RULES = ("max_rise", "max_drop")


@dataclass(frozen=True)
class Metric:
    name: str
    key: str  # its field in the registry (model/fields.py): RankMetrics attribute, or "bubble"
    per: str = "rank"  # "rank", or "stage" for pipeline bubbles

    @property
    def title(self) -> str:
        return FIELDS[self.key].label

    @property
    def unit(self) -> str:
        """What its limits are given in: "ratio", "ms" or "bytes"."""
        return _LIMIT_UNIT[FIELDS[self.key].unit]

    @property
    def higher_is_better(self) -> bool:
        return FIELDS[self.key].better == "higher"


_LIMIT_UNIT = {"pct": "ratio", "ms": "ms", "gib": "bytes"}
METRICS = {
    m.name: m
    for m in (
        Metric("overlap_ratio", "overlap_ratio"),
        Metric("exposed_comm", "exposed_comm_frac"),
        Metric("step_time", "step_time_ms"),
        Metric("memory_peak", "memory_peak"),
        Metric("bubble", "bubble", per="stage"),
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




@dataclass(frozen=True)
class PathMetric(Metric):
    """The critical path's length or one of HTA's five shares (docs/metrics.md "Critical path"): the job's path
    (`per` "job": one value, `Analysis.critical_path`) or each rank's (`RankMetrics.critical_path`). `key` is the
    path's field; a share is gated as a ratio (the summary's percent / 100), like overlap, so its limits read
    as every ratio's ("0.05" is 5 points)."""

    label: str = ""
    ratio: bool = True  # a share; False: the length in ms
    higher: bool = False  # only the compute share: a path that moved off compute moved to a cost

    @property
    def title(self) -> str:
        return self.label

    @property
    def unit(self) -> str:
        return "ratio" if self.ratio else "ms"

    @property
    def higher_is_better(self) -> bool:
        return self.higher


# HTA's five categories (model/critical_path.CATEGORIES), each named by the terminal's word (CP_COLUMNS; the gaps
# between kernels by its finer cause's, `kernel_gap`)
PATH_SHARES = (("cpu", "cpu_bound"), ("compute", "gpu_compute_bound"), ("comm", "gpu_communication_bound"),
               ("launch", "gpu_kernel_launch_overhead"), ("kernel_gap", "gpu_kernel_kernel_overhead"))


def _path_metrics(prefix: str, per: str, whose: str) -> list[PathMetric]:
    """Named by the terminal's word (`path_comm`: short enough for an 80-column verdict), HTA's key an alias."""
    return [PathMetric(f"{prefix}_length", "length_ms", per, f"critical path length ({whose})", False),
            *(PathMetric(f"{prefix}_{word}", key, per, f"critical path {key} share ({whose})", True,
                         key == "gpu_compute_bound") for word, key in PATH_SHARES)]


PATH_METRICS = {m.name: m for m in (*_path_metrics("path", "job", "job"), *_path_metrics("rank_path", "rank", "rank"))}
GATED: dict[str, Metric] = {**METRICS, **PATH_METRICS}  # every metric a gate may name
ALIASES.update({"critical_path": "path_length", **{f"{p}_{key}": f"{p}_{w}" for p in ("path", "rank_path")
                                                   for w, key in PATH_SHARES},
                "path_kernel_kernel": "path_kernel_gap", "rank_path_kernel_kernel": "rank_path_kernel_gap"})


def metric_named(name: str, where: str | None = None) -> Metric:
    m = GATED.get(ALIASES.get(name, name))
    if m is None:
        raise LlmdiagError(f"unknown metric {name!r}", where, f"use one of {', '.join(GATED)}")
    return m


@dataclass(frozen=True)
class Limit:
    value: float  # in the metric's unit (ratio, ms, bytes), or a fraction of the baseline when relative
    relative: bool
    text: str  # as the user wrote it, for messages
    noise: bool = False  # "1.5σ": `value` times the baseline's measured noise of the metric (gate/noise.py)
    plus_sigma: float = 0.0  # "0.05+1σ": the limit `value` plus this many σ (a move under both is not a regression)


_UNITS = {
    "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3,
    "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}
# One reading per string, so the match is linear: "12", "1.5" or ".5", then an optional exponent, then a unit.
# (The old `[0-9]*\.?[0-9]+` could split a run of digits n ways: a 16,000-digit limit took 30 s to refuse.)
_LIMIT_RE = re.compile(r"((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(%|[a-zA-Zµσ]+)?")
# "0.05+1σ": a limit, then "+" and a multiple of σ (the left part is any limit above; one σ term)
_PLUS_RE = re.compile(r"([^+]+?)\s*\+\s*((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+))\s*(?:σ|sigma)")
MAX_LIMIT_CHARS = 64  # "1.5e3ms", "512MiB", "10%": anything longer is not a limit
MAX_INT_DIGITS = 20  # a byte limit of 10^20 is 100 EB; a longer integer is a typo (or an attack), never a limit


def _shown(raw) -> str:
    """The limit as the error message quotes it: cut, so a 16,000-character one stays one readable line."""
    if isinstance(raw, int) and abs(raw) >= 10 ** MAX_INT_DIGITS:  # str() of a 5,000-digit int raises
        return f"an integer of more than {MAX_INT_DIGITS} digits"
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _in_range(lim: Limit, metric: Metric, rule: str, bad: str, where: str | None) -> Limit:
    """`lim` if its value can be exceeded by some value of the metric (see the module's docstring)."""
    if not math.isfinite(lim.value) or lim.value < 0:
        raise LlmdiagError(bad, where, "limits are finite and >= 0")
    if lim.noise:
        return lim  # any multiple of the noise can be exceeded
    if lim.relative and rule == "max_drop" and lim.value > 1:
        raise LlmdiagError(bad, where, "a relative drop is at most 100% of the baseline: a larger one can never "
                                       "happen, so the gate could never fail")
    if not lim.relative and metric.unit == "ratio" and lim.value > 1:
        raise LlmdiagError(bad, where, f"{metric.name} is a ratio in [0, 1]: give its limit as 0 to 1 (0.35) or "
                                       "0% to 100% (\"35%\"); a larger one could never fail")
    return lim


def parse_limit(raw, metric: Metric, rule: str, where: str | None = None) -> Limit:
    """A number in the metric's unit, "10%" (of the baseline; rise/drop rules only), "5ms", "512MiB", or "1.5σ"
    ("1.5sigma": rise/drop rules only; times the baseline's measured noise, gate/noise.py)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise LlmdiagError(f"bad limit {rule} = {_shown(raw)} for {metric.name}", where,
                           "give a number, or a string such as \"10%\"")
    if isinstance(raw, int) and abs(raw) >= 10 ** MAX_INT_DIGITS:  # before str() or float(): both fail or crawl
        raise LlmdiagError(f"bad limit {rule} = {_shown(raw)} for {metric.name}", where,
                           f"an integer limit has at most {MAX_INT_DIGITS} digits")
    bad = f"bad limit {rule} = {_shown(raw)} for {metric.name}"
    if isinstance(raw, str) and len(raw) <= MAX_LIMIT_CHARS and (plus := _PLUS_RE.fullmatch(raw.strip())):
        if rule not in RELATIVE_RULES:
            raise LlmdiagError(bad, where, "a limit plus σ widens a move against the baseline: use it with "
                                           "max_rise/max_drop")
        lim = parse_limit(plus.group(1), metric, rule, where)
        if lim.noise:
            raise LlmdiagError(bad, where, "write one σ term: \"0.05+1σ\" (points, or a %, plus a multiple of σ)")
        return Limit(lim.value, lim.relative, raw.strip(), plus_sigma=float(plus.group(2)))
    if not isinstance(raw, str):
        return _in_range(Limit(float(raw), False, format(raw, "g")), metric, rule, bad, where)
    if len(raw) > MAX_LIMIT_CHARS:
        raise LlmdiagError(bad, where, f"a limit is a number with an optional unit, at most {MAX_LIMIT_CHARS} "
                                       "characters")
    m = _LIMIT_RE.fullmatch(raw.strip())
    if not m:
        raise LlmdiagError(bad, where, "give a number, or a string such as \"10%\", \"5ms\", \"512MiB\"")
    num, unit = float(m.group(1)), (m.group(2) or "").lower()
    if unit == "%":
        if rule not in RELATIVE_RULES:
            if metric.unit != "ratio":
                raise LlmdiagError(bad, where, "a percentage is relative to the baseline: use it with "
                                               "max_rise/max_drop, or with a ratio metric's min/max")
            return _in_range(Limit(num / 100.0, False, raw.strip()), metric, rule, bad, where)  # a share: 0.2
        return _in_range(Limit(num / 100.0, True, raw.strip()), metric, rule, bad, where)
    if unit in ("σ", "sigma"):
        if rule not in RELATIVE_RULES:
            raise LlmdiagError(bad, where, "a limit in σ is a multiple of the baseline's noise: use it with "
                                           "max_rise/max_drop")
        return _in_range(Limit(num, False, raw.strip(), noise=True), metric, rule, bad, where)
    if unit:
        ok = (metric.unit == "ms" and unit in ("ms", "s", "us", "µs")) or (
            metric.unit == "bytes" and unit in ("b", "kb", "mb", "gb", "kib", "mib", "gib"))
        if not ok:
            raise LlmdiagError(bad, where, f"{metric.name} is measured in {metric.unit}")
        num *= _UNITS[unit]
    return _in_range(Limit(num, False, raw.strip()), metric, rule, bad, where)
