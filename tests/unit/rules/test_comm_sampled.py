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
