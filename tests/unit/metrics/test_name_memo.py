"""name_memo.per_name: one call per distinct name, the wrapped function's own answers, bounded memory."""

from __future__ import annotations

from llmdiag.diagnose.metrics.rank import name_memo
from llmdiag.diagnose.metrics.rank.comm_families import NAME_CAP
from llmdiag.diagnose.metrics.rank.name_memo import per_name


def test_each_name_is_computed_once_and_answers_are_the_functions():
    calls = []

    @per_name
    def f(name):
        calls.append(name)
        return len(name) % 3 or None  # None and 0-like answers are remembered too

    names = ["a", "bb", "ccc", "a", "ccc", "dddd"]
    assert [f(n) for n in names] == [len(n) % 3 or None for n in names]
    assert calls == ["a", "bb", "ccc", "dddd"]


def test_long_names_are_not_kept(monkeypatch):
    calls = []

    @per_name
    def f(name):
        calls.append(len(name))
        return True

    long = "x" * (NAME_CAP + 1)
    assert f(long) and f(long)
    assert calls == [NAME_CAP + 1, NAME_CAP + 1]


def test_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(name_memo, "MAX", 4)
    calls = []

    @per_name
    def f(name):
        calls.append(name)
        return name.upper()

    for n in "abcdefgh":
        assert f(n) == n.upper()
    assert f("h") == "H" and calls.count("h") == 1  # kept since the last clear
    assert f("a") == "A" and calls.count("a") == 2  # cleared when the table filled
