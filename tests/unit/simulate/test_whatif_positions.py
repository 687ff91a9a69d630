"""The what-if names a stage's ranks by their role in the resolved layout, and says no negative straggler
cost (issue 36 item 4): a tp4pp2 run's stage holds 4 TP peers, which the per-rank slowdown rows called "DP rank
0-3"; a pp2 run whose step replays faster than its ideal printed "stragglers cost -1.3 %". The layouts below are
written out by hand (rank = dp·tp·pp + ... as torchrun places them), the answers read from them."""

from __future__ import annotations

from llmdiag.diagnose.model.whatif import Contribution, WhatIf
from llmdiag.diagnose.model.whatif_view import contribution_rows, whatif_cards
from llmdiag.diagnose.simulate.kineto import positions


def _coords(pp: int, dp: int, tp: int) -> tuple[dict[int, int], dict[int, dict]]:
    """rank -> stage, rank -> coords for a dp × pp × tp mesh, tp innermost (torchtitan's order)."""
    stage, co = {}, {}
    for r in range(pp * dp * tp):
        t, p, d = r % tp, (r // tp) % pp, r // (tp * pp)
        stage[r] = p
        co[r] = {"pp": p, "dp": d, "tp": t, "fsdp": 0, "cp": 0}
    return stage, co


def test_tp4pp2_peers_are_tp_ranks():
    stage, co = _coords(pp=2, dp=1, tp=4)
    what, key = positions(stage, co)
    assert what == "TP rank"
    assert key == {0: "0", 1: "1", 2: "2", 3: "3", 4: "0", 5: "1", 6: "2", 7: "3"}


def test_dp2pp2_peers_are_dp_ranks():
    stage, co = _coords(pp=2, dp=2, tp=1)
    assert positions(stage, co) == ("DP rank", {0: "0", 1: "0", 2: "1", 3: "1"})


def test_several_dims_name_each():
    stage, co = _coords(pp=2, dp=2, tp=2)
    what, key = positions(stage, co)
    assert what == "ranks at" and key[5] == "dp1 tp1" and key[2] == "dp0 tp0"


def test_unknown_layout_is_a_place_in_the_stage():
    stage = {0: 0, 1: 0, 2: 1, 3: 1}
    assert positions(stage, {}) == ("rank in stage", {0: "0", 1: "1", 2: "0", 3: "1"})


def _w(slowdown: float, position: str = "DP rank") -> WhatIf:
    return WhatIf(source="kineto-pipeline", workers=8, steps=2, ops=100, measured_step_ms=110.0,
                  simulated_step_ms=110.0, no_delay_step_ms=100.0, ideal_step_ms=100.0 / slowdown,
                  slowdown=slowdown, sim_error=0.0, launch_slowdown=1.1, position=position,
                  contributions=[Contribution("dp_rank", "3", 1.05), Contribution("stage", "0", 1.06)])


def test_rows_and_cards_use_the_position():
    w = _w(1.057, "TP rank")
    assert ["TP rank", "3"] == contribution_rows(w)[-1][:2]
    top = dict((k, v) for k, v, _ in whatif_cards(w))["top contributors"]
    assert "TP rank 3" in top and "DP rank" not in top


def test_no_negative_straggler_cost():
    notes = " ".join(n for _, _, n in whatif_cards(_w(0.987)))
    assert "cost -" not in notes and "cost −" not in notes
    assert "no straggler cost" in notes
    assert "stragglers cost 5.4% of the step" in " ".join(n for _, _, n in whatif_cards(_w(1.057)))
