"""The sampled_capture caveat (rules/capture.py) states the one communication number a sample supports: the
recorded communication kernels per step, a lower bound read from the device's events only, and no exposure.
Summaries from tests/gen/summaries.py: 3 steps of 100 ms, comm_ms 14.0 per step, one all-reduce kind of 42.0 ms
over the 3 steps (14.0 ms per step): worked out by hand, 14.0 % of the step."""

from __future__ import annotations

import copy

from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import summary, typed


def _sampled(comm_ms: float | None = None, share: float | None = 0.62):
    s = summary()
    r = s["ranks"][0]
    r["chores"] = copy.deepcopy({"sampled_share": share})
    if comm_ms is not None:
        r["comm_ms"] = comm_ms
    return [f for f in run_rules(typed(s)) if f.id == "sampled_capture"]


def test_sampled_caveat_states_the_recorded_communication_as_a_lower_bound():
    (f,) = _sampled()
    t = f.evidence.text
    assert "recorded communication kernels alone run 14.00 ms (rank 0) per step (14.0% of rank 0's step" in t
    assert "allreduce up to 14.00 ms per step" in t and "lower bound" in t and "exposed is not stated" in t
    assert f.gain_ms is None and "every rank" in f.action and "without sampling" in f.action


def test_sampled_caveat_names_no_communication_below_its_floor_and_nothing_when_complete():
    (f,) = _sampled(comm_ms=4.0)  # 4 % of the 100-ms step: under COMM_FLOOR
    assert "recorded communication" not in f.evidence.text
    assert not _sampled(share=None)  # a complete capture gets no sampled caveat


def _phases(rows):
    s = summary()
    r = s["ranks"][0]
    r["chores"] = {"sampled_share": 0.62}
    r["phase_cover"] = rows
    return [f for f in run_rules(typed(s)) if f.id == "sampled_capture"]


def test_sampled_caveat_names_the_phases_the_sample_left_bare():
    # 100-ms steps: a 50-ms backward with 10 ms covered (20.0 %) is named; a 40-ms forward 30 ms covered (75 %) and
    # a 3-ms phase (under 5 % of the step) 0 covered are not
    (f,) = _phases([{"name": "## backward ##", "span_ms": 50.0, "covered_ms": 10.0},
                    {"name": "## forward ##", "span_ms": 40.0, "covered_ms": 30.0},
                    {"name": "## data_load ##", "span_ms": 3.0, "covered_ms": 0.0}])
    assert "unrecorded on rank 0" in f.evidence.text
    assert "`## backward ##` 50.00 ms per step, 20.0% of it covered" in f.evidence.text
    assert "forward" not in f.evidence.text and "data_load" not in f.evidence.text
    assert "until then `## backward ##` cannot be analysed" in f.action
    (g,) = _phases([{"name": "## backward ##", "span_ms": 50.0, "covered_ms": 30.0}])  # 60 % covered: not bare
    assert "unrecorded" not in g.evidence.text and "cannot be analysed" not in g.action
