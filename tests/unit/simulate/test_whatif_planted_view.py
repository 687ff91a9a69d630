"""Issue #28 item 4: the what-if section names a slowdown the manifest says was planted (`--inject-slow`) beside
the contributors it explains, and says why M_S leaves [0, 100 %] instead of printing a bare wild share.

A generated pp2 pipeline (tests/gen/pipeline.py) whose stage 0 runs its backward twice as long, with a manifest
holding `--inject-slow rank:0:2:backward`, and its twin without the option. The answer is the test's own: rank 0
is stage 0; the ideal backward is the mean over both stages (1.5 × b), so the last stage's backward (b) made
ideal grows and the step with it: M_S < 0, and stage 0 is where the slowdown sits."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.model.whatif_view import plant_of, whatif_cards
from llmdiag.reports.render import render_html
from tests.gen.pipeline import Case, write

WORDS = "rank 0's backward was slowed ×2 on purpose (--inject-slow rank:0:2:backward, recorded in the manifest)"


@dataclasses.dataclass
class BackwardSlow(Case):
    """Stage 0's backward costs twice as long; its forward and every other stage as the generator makes them."""

    def cost(self, s: int, kind: str, mb: int = 0) -> int:
        c = super().cost(s, kind, mb)
        return 2 * c if s == 0 and kind == "B" else c


def _run(tmp_path, spec):
    write(BackwardSlow(p=2, m=4, steps=3), tmp_path)
    man = {"schema_version": 1, "workload": "pp2", "world_size": 2, "status": "ok",
           "layout": {"dp": 1, "fsdp": 1, "tp": 1, "pp": 2, "cp": 1},
           "options": {"inject_slow": spec} if spec else {}}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.whatif is not None and not a.whatif.missing
    text = re.sub(r"\s+", " ", render(a, width=400))
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", render_html(a))).replace("&#39;", "'").replace("&#x27;", "'")
    return a, {label: (value, note) for label, value, note in whatif_cards(a.whatif, plant_of(a))}, text, page


def test_planted_slowdown_is_named_beside_its_contributors(tmp_path):
    a, cards, text, page = _run(tmp_path, "rank:0:2:backward")
    value, note = cards["planted"]
    assert value == "rank 0 backward ×2" and WORDS in note
    assert "stage 0" in note and "op type backward-compute" in note and "stage 1" not in note
    top = cards["top contributors"][0]
    assert "stage 0 " in top and re.search(r"stage 0 [0-9.]+ \(planted\)", top)
    assert not re.search(r"stage 1 [0-9.]+ \(planted\)", top) and "forward-compute 1.0 (planted)" not in top
    labels = [x[0] for x in whatif_cards(a.whatif, plant_of(a))]
    assert labels.index("planted") == labels.index("top contributors") + 1  # next to the contributors
    assert WORDS in text and WORDS in page  # the terminal and the report print the same card


@pytest.mark.parametrize("spec", [None, "rank:0:two"])
def test_twin_without_the_option_names_nothing(tmp_path, spec):
    """No option, or a value that is not the knob's syntax: the same trace, nothing called planted."""
    a, cards, text, page = _run(tmp_path, spec)
    assert plant_of(a) is None and "planted" not in cards
    assert "(planted)" not in cards["top contributors"][0]
    assert "inject-slow" not in text and "on purpose" not in page


def test_negative_ms_is_explained_not_a_formatting_bug(tmp_path):
    """M_S is (no-delay − step with the last stage ideal) / (no-delay − ideal). With stage 0 the slow one, the
    last stage made ideal slows (its backward b becomes the mean 1.5 b): the numerator is negative, so M_S < 0,
    and it equals that stage's gain over the slowdown. The card says why and names stage 0."""
    a, cards, _, _ = _run(tmp_path, None)
    w = a.whatif
    assert w.ms is not None and w.ms < 0
    assert w.stage_gains["1"] < 0 < w.stage_gains["0"]
    assert w.ms == pytest.approx(w.stage_gains["1"] / (w.no_delay_step_ms - w.ideal_step_ms))
    value, note = cards["M_S (last stage)"]
    assert value.startswith("-") and "negative: the last stage runs faster" in note
    assert "the slowdown sits in stage 0" in note


def test_positive_ms_has_no_sign_note():
    """A last stage heavier than the mean (the usual case): M_S in [0, 1], no extra words."""
    from llmdiag.diagnose.model.whatif import WhatIf

    w = WhatIf(source="kineto-pipeline", workers=2, steps=3, ops=48, slowdown=1.2, ms=0.8, mw=0.5, mw_ranks=[1],
               no_delay_step_ms=12.0, ideal_step_ms=10.0, measured_step_ms=12.1, simulated_step_ms=12.1,
               sim_error=0.0, launch_slowdown=1.0, stage_gains={"0": -0.4, "1": 1.6})
    cards = {label: note for label, _, note in whatif_cards(w)}
    assert cards["M_S (last stage)"] == "share of the slowdown removed by making the last stage's ops ideal"
    assert "over 100 %" not in cards["M_W (worst workers)"]
