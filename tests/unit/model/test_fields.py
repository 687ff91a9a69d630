"""One registry of the per-rank metrics (model/fields.py): `check`, `diff`, the terminal and report spreads,
the heatmap, the step-part figures and the tables' schema all read their label, unit and good direction from
it, so none can drift from another. The directions are checked against the test's own answer."""

import pytest

from llmdiag.diagnose.export.tables import TABLES
from llmdiag.diagnose.gate.diff import compare
from llmdiag.diagnose.gate.limits import METRICS
from llmdiag.diagnose.model.fields import FIELDS, STEP_PARTS
from llmdiag.diagnose.model.views import DISTRIBUTIONS
from llmdiag.reports.charts import HEAT_ROWS
from tests.gen import summaries

# the good direction of each metric, from what it measures: time lost is lower-better, overlap higher-better,
# a part of the step that is neither (compute, communication, overlapped comm) has none
WANT = {"step_time_ms": "lower", "compute_ms": None, "comm_ms": None, "overlapped_comm_ms": None,
        "exposed_comm_ms": "lower", "compute_only_ms": None, "other_ms": "lower", "idle_ms": "lower",
        "overlap_ratio": "higher", "exposed_comm_frac": "lower", "idle_frac": "lower", "memory_peak": "lower",
        "bubble": "lower"}


def test_directions():
    assert {k: f.better for k, f in FIELDS.items()} == WANT


@pytest.mark.parametrize("name", sorted(METRICS))
def test_gate_reads_the_registry(name):
    m = METRICS[name]
    f = FIELDS[m.key]
    assert (m.title, m.higher_is_better) == (f.label, WANT[m.key] == "higher")
    assert m.unit == {"pct": "ratio", "ms": "ms", "gib": "bytes"}[f.unit]


def test_spreads_heatmap_and_parts_read_the_registry():
    for label, key, unit, _ in DISTRIBUTIONS:
        assert (label, unit) == (FIELDS[key].label, FIELDS[key].unit)
    labels = {f.label: f.unit for f in FIELDS.values()}
    assert all(labels[label] == unit for label, unit, _ in HEAT_ROWS)
    assert all(p.colour for p in STEP_PARTS) and len({p.colour for p in STEP_PARTS}) == 5


def test_tables_schema_reads_the_registry():
    steps = {c: d for c, _, d in TABLES["steps"][1]}
    for k in ("compute_ms", "comm_ms", "overlapped_comm_ms", "exposed_comm_ms", "compute_only_ms", "other_ms",
              "idle_ms"):
        assert steps[k] == FIELDS[k].meaning


def test_diff_rows_take_label_and_direction_from_the_registry():
    a, b = summaries.typed(summaries.summary(4)), summaries.typed(summaries.summary(4))
    for r in b.ranks:
        r.idle_ms += 5.0
    rows = {r.name.strip(): r for s in compare(a, b).sections for r in s.rows}
    for k in ("step_time_ms", "overlapped_comm_ms", "exposed_comm_ms", "other_ms", "idle_ms"):
        row = rows[FIELDS[k].label]
        assert (row.unit, row.better) == (FIELDS[k].unit, WANT[k])
    assert rows["idle"].change == "up" and rows["idle"].effect == "worse"
    assert rows[f"{FIELDS['overlap_ratio'].label}, mean"].better == "higher"
