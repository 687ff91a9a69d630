"""The communication-exposure rules leave event-sampled ranks out (rules/comm_gain.py overlap_unmeasured): each
fires on its trigger summary (tests/unit/rules/test_rules.py TRIGGERS), is silent where every rank's capture is
event-sampled (RankChores.sampled_share recorded), and judges the other ranks where one is, never naming it."""

from __future__ import annotations

import copy

import pytest

from tests.unit.rules.test_rules import TRIGGERS, findings
from tests.gen.summaries import summary

RULES = ["dp_overlap", "tp_exposed", "low_busbw", "exposed_comm"]


def _sampled(s: dict, ranks) -> dict:
    s = copy.deepcopy(s)
    for r in s["ranks"]:
        if r["rank"] in ranks:
            r["chores"] = {"sampled_share": 0.62}  # hta/sampled_pair's rank 0
    return s


@pytest.mark.parametrize("rule", RULES)
def test_silent_where_every_rank_is_sampled(rule):
    s = TRIGGERS[rule][1](summary())
    assert rule in [f["id"] for f in findings(s)]  # the trigger fires on the complete capture
    assert rule not in [f["id"] for f in findings(_sampled(s, {r["rank"] for r in s["ranks"]}))]


@pytest.mark.parametrize("rule", RULES)
def test_a_sampled_rank_is_left_out_of_the_others_finding(rule):
    s = TRIGGERS[rule][1](summary())
    assert len(s["ranks"]) >= 2
    got = [f for f in findings(_sampled(s, {0})) if f["id"] == rule]
    assert got and all(0 not in f["ranks"] for f in got)


def test_moe_exposed_a2a_reads_the_measured_ranks_only():
    """4 EP ranks at 30 % exposed; rank 0 sampled with 90 %: the share over ranks 1-3 is 30 % (the evidence's),
    with all sampled the rule is silent; ranks 1-3 at 2 % and rank 0 sampled at 90 %: silent (the job's mean
    24 % is rank 0's sample)."""
    from tests.unit.rules.test_cpu_advice import _moe

    s = _moe(summary(4))
    step = s["ranks"][0]["step_time_ms"]
    s["moe"]["ranks"][0]["a2a_exposed_ms"] = 0.9 * step
    got = {f["id"]: f for f in findings(_sampled(s, {0}))}["moe_exposed_a2a"]
    assert 0 not in got["ranks"] and "(30.0% of the step, mean over 3 EP ranks)" in got["evidence"]
    assert "moe_exposed_a2a" not in [f["id"] for f in findings(_sampled(s, {0, 1, 2, 3}))]
    for r in s["moe"]["ranks"][1:]:
        r["a2a_exposed_ms"] = 0.02 * step
    s["moe"]["a2a_exposed_frac"] = (0.9 + 3 * 0.02) / 4
    assert "moe_exposed_a2a" in [f["id"] for f in findings(s)]  # complete: 24 % over the four
    assert "moe_exposed_a2a" not in [f["id"] for f in findings(_sampled(s, {0}))]
