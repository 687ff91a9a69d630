"""Straggler attribution by the what-if replay on the planted corpus (tests/gen/planted.py): the replay
names a rank (the one whose ideal gains most, WhatIf.worker_gains, its op type the one whose ideal alone
gains most on it) or a point-to-point link (WhatIf.link_gains, where the named rank's loss is in p2p
communication), if that gain is at least 1 % of the step (diagnose.simulate.gains.attribution). Precision
and recall must reach 0.95 (the issue's bar; Minder reports precision 0.904)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.simulate.gains import attribution
from tests.gen.pipeline import write
from tests.gen.planted import corpus


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = []
    for k, c in enumerate(corpus()):
        d = tmp_path_factory.mktemp(f"case{k}")
        write(c, d)
        w = analyze_path(str(d), jobs=1, rules=False).whatif
        assert w is not None and not w.missing, k
        out.append((c, attribution(w)))
    return out


def _right(c, got) -> bool:
    if c.truth:
        return got.rank == c.truth[0] and got.link is None
    return c.truth_link is not None and got.link == c.truth_link


def test_corpus_size(results):
    planted = [c for c, _ in results if c.truth or c.truth_link]
    assert len(planted) >= 30 and len(results) - len(planted) >= 12
    assert sum(1 for c in planted if c.truth_link) >= 10


@pytest.mark.parametrize("what", ["all", "rank", "link"])
def test_precision_and_recall(results, what):
    def planted(c):
        return {"all": bool(c.truth or c.truth_link), "rank": bool(c.truth), "link": bool(c.truth_link)}[what]

    def kind(got):  # the flags counted: of the kind asked for
        return what == "all" or (what == "rank") == (got.link is None)

    tp = sum(1 for c, got in results if planted(c) and got and _right(c, got))
    flagged = sum(1 for _, got in results if got and kind(got))
    n = sum(1 for c, _ in results if planted(c))
    precision, recall = tp / max(flagged, 1), tp / n
    print(f"planted corpus ({what}): {n} planted of {len(results)}; flagged {flagged}, right {tp}: "
          f"precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.95 and recall >= 0.95


def test_silent_twins_flag_nothing(results):
    assert [got for c, got in results if not (c.truth or c.truth_link) and got] == []


def test_op_type_where_one_was_planted(results):
    typed = [(c, got) for c, got in results if c.truth and c.truth[1] and got and got.rank == c.truth[0]]
    right = sum(1 for c, got in typed if got.optype == c.truth[1])
    print(f"op type right in {right} of {len(typed)}")
    assert len(typed) >= 14 and right / len(typed) >= 0.95


def test_the_section_prints_the_slowest_link(tmp_path):
    from llmdiag.diagnose.model.whatif_view import whatif_cards
    from tests.gen.planted import links

    c = links()[3]  # 4 stages, 1F1B, link between stages 0 and 1 slow
    write(c, tmp_path)
    cards = {label: (value, note) for label, value, note in whatif_cards(analyze_path(str(tmp_path), jobs=1).whatif)}
    assert cards["slowest link"][0] == f"ranks {c.truth_link}" and "estimate" in cards["slowest link"][1]


def test_shares_of_a_small_slowdown_are_said_to_be_unstable():
    """The demo (pp2 on 2 cores) printed S 1.032 beside M_S −163.6 % and M_W 263.6 %: shares of a 3 % slowdown.
    Below 5 % the section says why such shares leave [0, 100 %]; above it, nothing is added."""
    from llmdiag.diagnose.model.whatif import WhatIf
    from llmdiag.diagnose.model.whatif_view import whatif_cards

    def labels(slowdown):
        w = WhatIf(source="kineto-pipeline", workers=2, steps=3, ops=48, slowdown=slowdown, ms=-1.636, mw=2.636,
                   mw_ranks=[0], no_delay_step_ms=63.2, ideal_step_ms=63.2 / slowdown, measured_step_ms=66.4,
                   simulated_step_ms=66.4, sim_error=0.0, launch_slowdown=1.05)
        return {label: note for label, _, note in whatif_cards(w)}

    small = labels(1.032)
    assert "S − 1 is only 3.2%" in small["shares"] and "over 100 %" in small["shares"]
    assert "shares" not in labels(1.18)
