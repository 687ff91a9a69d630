"""One number, one text (issue 34): a critical-path share prints the same in the terminal's table and paragraph, the
report, `diff` and `check`. 27.25 % is a value where the two roundings once used differ: `f"{27.25:.1f}"` gives
27.2 and `fmt(0.2725, "pct")` 27.3 %, so a sink formatting on its own shows here."""

from __future__ import annotations

import re

from llmdiag.diagnose.cli import terminal
from llmdiag.diagnose.gate.diff import compare, render_text
from llmdiag.diagnose.gate.format import render_verdict
from llmdiag.diagnose.gate.verdict import default_gates, evaluate
from llmdiag.diagnose.model.format import fmt
from llmdiag.reports.context import Num
from llmdiag.reports.critical_path import critical_path_view
from tests.unit.gate.test_gate_path import side

STEPS = [(100.0, 27.25, 47.75, 20.0, 3.0, 2.0)] * 3  # cpu 27.25 % of the path in every step


def test_a_share_prints_the_same_everywhere(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    a = side(steps=STEPS)
    want, other = fmt(0.2725, "pct"), f"{27.25:.1f}"
    assert want != other + "%"  # the test's premise: the two roundings differ here
    term = terminal._critical_path(a)
    table = term[:term.index("Job critical path")]
    assert f" {want[:-1]} " in table and f" {other} " not in table  # the table's bare number
    assert f"cpu {want[:-1]} %" in term  # the job paragraph: the same number (its prose spaces the sign)
    view = critical_path_view(a, Num)
    assert str(view["rows"][0]["parts"][0]) == want
    assert f"cpu {want}" in re.sub(r"<[^>]+>", "", str(view["job"]["text"]))  # the paragraph, tags stripped
    diff = render_text(compare(a, a))
    assert "job cpu" in diff and f" {want} " in diff and f" {other}%" not in diff
    check = render_verdict(evaluate(a, a, default_gates()))
    assert f" {want} " in check and f" {other}%" not in check
