"""The chores and capture rules (diagnose/rules/chores.py, capture.py) on summaries built to trigger them: each
fires with the gain its numbers give (worked out by hand here), and stays silent below its precondition or on an
event-sampled capture. The planted traces behind them: tests/expert/planted_recall_b.py."""

from __future__ import annotations

import copy

import pytest

from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import summary, typed


def _with(chores_by_rank: dict) -> dict:
    s = summary()
    for r in s["ranks"]:
        if r["rank"] in chores_by_rank:
            r["chores"] = copy.deepcopy(chores_by_rank[r["rank"]])
    return s


def _fired(s: dict, rid: str):
    return [f for f in run_rules(typed(s)) if f.id == rid]


def _step(s: dict) -> float:
    return s["ranks"][0]["step_time_ms"]


ZG = {"zero_grad_ms": 6.0, "zero_grad_launches": 161.0, "zero_grad_idle_ms": 5.8,
      "zero_grad_op": "Optimizer.zero_grad#SGD.zero_grad"}
PG = {"pageable_copies": 2.0, "pageable_device_ms": 2.9, "pageable_call_ms": 14.0, "pageable_idle_ms": 2.6,
      "pageable_name": "Memcpy HtoD (Pageable -> Device)"}
BUF = {"buffer_bcasts": 2.0, "buffer_elems": "53120 Float + 53 Long", "buffer_host_ms": 29.4, "buffer_idle_ms": 29.3}


def test_zero_grad_fires_with_the_idle_inside_it_and_not_without_launches_or_on_a_sampled_capture():
    s = _with({0: ZG, 1: dict(ZG, zero_grad_idle_ms=4.8)})
    (f,) = _fired(s, "zero_grad")
    assert f.gain_ms == pytest.approx((5.8 + 4.8) / 2) and f.gain_kind == "bound"
    assert "set_to_none=True" in f.action and "161" in f.evidence.text
    assert not _fired(_with({0: dict(ZG, zero_grad_launches=0.0)}), "zero_grad")  # set_to_none=True: none
    assert not _fired(_with({0: dict(ZG, sampled_share=0.6)}), "zero_grad")  # idle overstated when sampled
    assert not _fired(_with({0: dict(ZG, zero_grad_idle_ms=0.1)}), "zero_grad")  # under 0.2 ms


def test_pageable_copy_fires_on_the_host_held_and_claims_the_idle_after():
    (f,) = _fired(_with({0: PG}), "pageable_copy")
    assert f.gain_ms == pytest.approx(2.6) and "pin_memory=True" in f.action and "14.00 ms" in f.evidence.text
    held = 0.005 * _step(summary())  # half the 1 % floor
    assert not _fired(_with({0: dict(PG, pageable_call_ms=held)}), "pageable_copy")


def test_broadcast_buffers_needs_broadcasts_inside_the_ddp_forward():
    (f,) = _fired(_with({0: BUF}), "broadcast_buffers")
    assert f.gain_ms == pytest.approx(29.3) and "broadcast_buffers=False" in f.action
    assert "53120 Float + 53 Long" in f.evidence.text
    assert not _fired(_with({0: dict(BUF, buffer_bcasts=0.0)}), "broadcast_buffers")


def test_embedding_imbalance_names_the_slowest_rank_and_claims_its_excess_over_the_mean():
    s = summary()
    n = len(s["ranks"])
    heavy = 0.10 * _step(s)  # rank 1's lookups; every other rank's a quarter of it
    chores = {r["rank"]: {"lookup_ms": heavy if r["rank"] == 1 else heavy / 4, "lookup_kernels": 4.0,
                          "lookup_top": "split_embedding_codegen_forward_unweighted_kernel", "lookup_top_ms": 1.0}
              for r in s["ranks"]}
    assert not _fired(_with(chores), "embedding_imbalance")  # no all_to_all: not sharded tables
    a2a = _with(chores)
    for r in a2a["ranks"]:
        r["comm_by_kind"].append(dict(r["comm_by_kind"][0], kind="alltoall", pg="mesh_ep"))
    (f,) = _fired(a2a, "embedding_imbalance")
    mean = (heavy + (n - 1) * heavy / 4) / n
    assert f.evidence.ranks == [1] and f.gain_ms == pytest.approx(heavy - mean, abs=1e-6)
    for r in a2a["ranks"]:
        r["chores"]["lookup_ms"] = heavy
    assert not _fired(a2a, "embedding_imbalance")  # balanced


def test_capture_caveats_state_a_fact_and_claim_no_gain():
    (f,) = _fired(_with({0: {"meta_op": "aten::view", "meta_calls": 2265, "meta_min_us": 20.4,
                             "meta_median_us": 23.0}}), "slow_host_ops")
    assert f.gain_ms is None and f.severity == "low" and "20.4 µs" in f.evidence.text
    assert not _fired(_with({0: {"meta_op": "aten::view", "meta_calls": 50, "meta_min_us": 20.4,
                                 "meta_median_us": 23.0}}), "slow_host_ops")  # too few calls
    (g,) = _fired(_with({0: {"sampled_share": 0.62}}), "sampled_capture")
    assert g.gain_ms is None and "lower bound" in g.action
    fs = [x.id for x in run_rules(typed(_with({0: {"sampled_share": 0.62}})))]
    assert fs[0] == "sampled_capture"  # a caveat reads first
