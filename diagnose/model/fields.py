"""The summary's per-rank metrics as every output names them: one registry of (key, label, unit, better
direction, colour, meaning), read by the terminal, the report, `diff`, `check` and `--tables`, so a metric
has one name, one unit and one good direction wherever it is printed or gated.

`key` is the RankMetrics (and, for the step parts, StepBreakdown) attribute, or `bubble` for the pipeline's
per-stage bubble; `unit` a model/format.py UNITS key; `better` "lower", "higher" or None (a part of the step
that is neither good nor bad alone); `colour` the step parts' colour in the figures; `meaning` what the number
is, as the tables' schema states it.
"""

from __future__ import annotations

from typing import NamedTuple


class MetricField(NamedTuple):
    key: str
    label: str
    unit: str
    better: str | None
    colour: str = ""
    meaning: str = ""


FIELDS = {f.key: f for f in (
    MetricField("step_time_ms", "step time", "ms", "lower", meaning="window length"),
    MetricField("compute_ms", "compute", "ms", None, meaning="|U(compute)| in the step"),
    MetricField("comm_ms", "communication", "ms", None, meaning="|U(comm)| in the step"),
    MetricField("overlapped_comm_ms", "overlapped comm", "ms", None, "#72b7b2", "|U(comm) ∩ U(compute)|"),
    MetricField("exposed_comm_ms", "exposed comm", "ms", "lower", "#e45756", "|U(comm) − U(compute)|"),
    MetricField("compute_only_ms", "compute only", "ms", None, "#4c78a8", "|U(compute) − U(comm)|"),
    MetricField("other_ms", "other (memcpy/memset)", "ms", "lower", "#b279a2",
                "memcpy/memset time under neither compute nor comm"),
    # grey a shade darker than the card, so a thin idle part still shows
    MetricField("idle_ms", "idle", "ms", "lower", "#c7c7c7", "nothing running"),
    MetricField("overlap_ratio", "overlap ratio", "pct", "higher", meaning="overlapped / comm; null without comm"),
    MetricField("exposed_comm_frac", "exposed comm / step time", "pct", "lower", meaning="exposed comm / step time"),
    MetricField("idle_frac", "idle / step time", "pct", "lower", meaning="idle / step time"),
    MetricField("memory_peak", "memory peak (allocated)", "gib", "lower", meaning="peak allocated over its devices"),
    MetricField("bubble", "pipeline bubble", "pct", "lower", meaning="1 − the stage's busy time / pipeline window"),
)}

# The five parts a step's time splits into (metrics/rank/overlap.py: they sum to the step), in the order the
# figures stack them.
STEP_PARTS = tuple(FIELDS[k] for k in ("compute_only_ms", "overlapped_comm_ms", "exposed_comm_ms", "other_ms",
                                       "idle_ms"))
# The breakdown's columns (summary `ranks[].steps[]`, tables `steps`), in the model's field order.
BREAKDOWN = tuple(FIELDS[k] for k in ("compute_ms", "comm_ms", "overlapped_comm_ms", "exposed_comm_ms",
                                      "compute_only_ms", "other_ms", "idle_ms", "overlap_ratio"))
