"""The critical path as the gate and the diff read it (docs/metrics.md "Critical path"; docs/ci.md "Critical path").

The job's path (`Analysis.critical_path`) is one value per side; a rank's (`RankMetrics.critical_path`) one per
rank. A share is read as a ratio, the summary's percent / 100, as the report prints it (`fmt(x / 100, "pct")`,
reports/critical_path.py), so the diff, the check and the report print the same text for the same number. A path
may be absent on purpose: an event-sampled capture states none (`critical_path: null` with the reason in
`critical_path_note`), and CPU traces or a one-rank job have no job path. Then the gate and the diff say "not
compared" and why, rather than fail closed on a metric that vanished: the reason is in the summary.
"""

from __future__ import annotations

import math
from math import isfinite
from operator import attrgetter

from llmdiag.diagnose.gate.limits import PathMetric
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.critical_path import CATEGORIES, CriticalPath
from llmdiag.diagnose.model.format import plural, ranges


def read(p: CriticalPath | None, field: str, ratio: bool) -> float | None:
    """One field of a path: the length in ms, or a share as a ratio (percent / 100); None where undefined."""
    if p is None:
        return None
    v = getattr(p, field, None)
    if v is None or isinstance(v, bool) or not math.isfinite(v):
        return None
    return float(v) / 100.0 if ratio else float(v)


def path_units(a: Analysis, m: PathMetric) -> dict[int, tuple[str, float | None]]:
    """`values.units` for a path metric: the job's path as one unit (key -1, absent where the job has none), or
    each rank's."""
    if m.per == "job":
        return {} if a.critical_path is None else {-1: ("job", read(a.critical_path, m.key, m.ratio))}
    return {r.rank: (f"rank {r.rank}", read(r.critical_path, m.key, m.ratio)) for r in a.ranks}


def step_series(a: Analysis, m: PathMetric) -> list[list[float]]:
    """The metric's per-step values: the job path's steps (`per_step`), or each rank's steps' paths; the steps'
    own spread is part of a σ limit's noise (gate/noise.py)."""
    if m.per == "job":
        steps = a.critical_path.per_step if a.critical_path is not None else []
        return [[v for s in steps if (v := read(s, m.key, m.ratio)) is not None]]
    return [[v for s in r.steps if (v := read(s.critical_path, m.key, m.ratio)) is not None] for r in a.ranks]


def unstated(a: Analysis, m: PathMetric) -> str:
    """Why the side has no value for `m` on some unit ("" where every unit has one): the summary's own note where
    it gives one (an event-sampled capture), else what the trace lacks."""
    if m.per == "job":
        if a.critical_path is not None:
            return ""
        if a.critical_path_note:
            return f"no job critical path: {a.critical_path_note}"
        return ("no job critical path (" + ("CPU trace" if a.trace_kind == "cpu" else
                                            "one rank" if len(a.ranks) < 2 else "no collective matched across ranks")
                + ")")
    missing = [r for r in a.ranks if r.critical_path is None]
    if not missing:
        return ""
    note = next((r.critical_path_note for r in missing if r.critical_path_note), "")
    who = f"{plural(len(missing), 'rank')} ({ranges(sorted(r.rank for r in missing))})"
    why = note or ("CPU trace" if a.trace_kind == "cpu" else "no path stated")
    return f"no critical path on {who} of {len(a.ranks)}: {why}"


def reasons(sides: list[tuple[str, Analysis | None]], m: PathMetric) -> str:
    """"A: why; B: why" for the sides that lack the path on some unit, one reason said once where both give it
    ("A and B: why"); "" where every side has it."""
    why = [(side, w) for side, a in sides if a is not None and (w := unstated(a, m))]
    if len(why) == 2 and why[0][1] == why[1][1]:
        return f"{why[0][0]} and {why[1][0]}: {why[0][1]}"
    return "; ".join(f"{side}: {w}" for side, w in why)


def not_compared(base: Analysis | None, cur: Analysis, m: PathMetric) -> str:
    """"not compared: why" where either side lacks the path on some unit, "" where both have it."""
    why = reasons([("baseline", base), ("current", cur)], m)
    return f"not compared: {why}" if why else ""


def sought(a: Analysis) -> bool:
    """Whether the side's analysis looked for a path at all (GPU traces): a CPU summary's null path is no news."""
    return a.critical_path is not None or bool(a.critical_path_note) or any(
        r.critical_path is not None or r.critical_path_note for r in a.ranks)


def rank_means(a: Analysis) -> dict[str, float | None]:
    """Field -> its mean over the ranks that state a path (the diff's rank-path rows say so), shares as ratios:
    one pass over the ranks, then one over their paths per field (a 16,384-rank diff reads each path 6 times)."""
    fields = ("length_ms", *CATEGORIES)
    get = attrgetter(*fields)  # every field of a path in one visit: the paths lie scattered in memory
    columns = zip(*[get(p) for r in a.ranks if (p := r.critical_path) is not None])
    out: dict[str, float | None] = dict.fromkeys(fields)
    for f, col in zip(fields, columns):
        vals = [float(v) for v in col if v is not None and isfinite(v)]  # `read`'s test
        out[f] = None if not vals else math.fsum(vals) / len(vals) / (1.0 if f == "length_ms" else 100.0)
    return out

