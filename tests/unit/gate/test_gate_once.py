"""check and diff compute each side's per-rank values once (gate/values.py `once`), the verdict and the comparison
being what they were when every gate recomputed them; a summary read back leaves the collector as it found it."""

from __future__ import annotations

import contextlib
import dataclasses
import gc

import orjson

from llmdiag.diagnose.gate import diff, values, verdict
from llmdiag.diagnose.gate.diff import compare, row
from llmdiag.diagnose.gate.verdict import METRICS, default_gates, evaluate
from llmdiag.diagnose.model.summary import read_summary
from tests.unit.gate.test_gate import GiB, gates, make_analysis, make_pipeline


def _sides():
    base = make_analysis(n=6, pipeline=make_pipeline([0.2, 0.3, 0.25]))
    cur = make_analysis(n=6, pipeline=make_pipeline([0.2, 0.35, 0.25]),
                        ranks={1: {"step": 130.0, "overlap": 0.6}, 4: {"mem": 2 * GiB, "exposed": 0.2}})
    return base, cur


GATES = gates(("step_time", "max_rise", "10%"), ("overlap_ratio", "max_drop", 0.05), ("memory_peak", "max_rise", "5%"),
              ("bubble", "max_rise", 0.01), ("exposed_comm", "max", 0.1), ("overlap_ratio", "min", 0.7), agg="rank") + \
    default_gates() + default_gates("mean", cpu=True) + gates(("step_time", "max", 120.0), agg="max")


def _counting(monkeypatch) -> list:
    calls: list = []
    real = values._units

    def spy(a, metric):
        calls.append((id(a), metric.name))
        return real(a, metric)

    monkeypatch.setattr(values, "_units", spy)
    return calls


def test_each_side_and_metric_computed_once_and_the_verdict_unchanged(monkeypatch):
    base, cur = _sides()
    calls = _counting(monkeypatch)
    v = evaluate(cur, base, GATES, repeats=[base])
    assert len(calls) == len(set(calls)) == 2 * len(METRICS)  # 5 metrics on two sides, each once
    monkeypatch.setattr(verdict, "once", contextlib.nullcontext)  # every gate recomputing, as before
    calls.clear()
    again = evaluate(cur, base, GATES, repeats=[base])
    assert len(calls) > 4 * len(METRICS)
    assert dataclasses.asdict(again) == dataclasses.asdict(v)
    assert v.status == "fail" and {r.metric for r in v.failed()} >= {"step_time", "memory_peak", "bubble"}


def test_values_are_not_kept_between_calls():
    base, cur = _sides()
    first = evaluate(cur, base, GATES[:1])
    cur.ranks[1].step_time_ms = 100.0  # the regression fixed: the next check reads the side again
    second = evaluate(cur, base, GATES[:1])
    assert (first.results[0].status, second.results[0].status) == ("fail", "pass")
    assert values._memo is None


def test_diff_per_rank_rows_as_one_row_per_rank_gave_them(monkeypatch):
    """The rows of the ranks that moved, as the former code built them: a row for every rank, then filtered."""
    base, cur = _sides()
    for r in cur.ranks[2:]:
        r.step_time_ms *= 1 + r.rank / 100  # ranks 2-5 move by 2-5 %; 1 % would be "same"
    got = next(s for s in compare(base, cur).sections if s.title.startswith("Per rank"))
    want = []
    for name, measure in (("step_time", "time"), ("overlap_ratio", "overlap"), ("exposed_comm", "waste_frac"),
                          ("memory_peak", "memory")):
        ua, ub = values.units(base, METRICS[name]), values.units(cur, METRICS[name])
        rows = [row(f"{ua[k][0]} {name}", measure, ua[k][1], ub[k][1]) for k in sorted(ua)]
        moved = [x for x in rows if (x.a is not None or x.b is not None) and x.change not in ("same", "")]
        want += sorted(moved, key=lambda x: -(abs(x.delta) * 100 if x.unit == "pct" else abs(x.rel or 0)))
    assert got.rows == want
    assert [r.name for r in got.rows[:4]] == ["rank 1 step_time", "rank 5 step_time", "rank 4 step_time",
                                              "rank 3 step_time"]
    once = dataclasses.asdict(compare(base, cur))
    monkeypatch.setattr(diff, "once", contextlib.nullcontext)  # every section recomputing, as before
    assert dataclasses.asdict(compare(base, cur)) == once


def test_read_summary_leaves_the_collector_as_it_was(tmp_path):
    """The summary's objects go to the oldest generation (freeze, then unfreeze): nothing stays frozen, and a
    caller's own frozen objects stay frozen."""
    p = tmp_path / "s.json"
    base, _ = _sides()
    p.write_bytes(orjson.dumps(base.to_dict()))
    assert gc.get_freeze_count() == 0
    a = read_summary(str(p))
    assert gc.get_freeze_count() == 0
    assert any(o is a.ranks[0] for o in gc.get_objects(generation=2))
    gc.freeze()
    try:
        held = gc.get_freeze_count()
        read_summary(str(p))
        assert gc.get_freeze_count() == held
    finally:
        gc.unfreeze()
