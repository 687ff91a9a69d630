"""`--run all` is linear in runs (issue 35, low: "`--run all` output is quadratic in runs").

Before, each of the R analyses described every run again (`run_infos`: each run's wall-clock span from every
file; `runs_message`: every run's completeness and processes), so a folder of R runs cost R × (all files).
Now the runs are described once and each analysis takes its marked copy. Counted, not timed: the span and
completeness tests per file and per run, on generated folders of 4 and 16 runs whose files the test wrote.
"""

from __future__ import annotations

import orjson
import pytest

from llmdiag.diagnose.analyze import analyze_runs
from llmdiag.diagnose.metrics.job import runs as runs_mod
from tests.unit.metrics.test_runs_folders import APART_US, WALL_US, write_run

WORLD = 2


def _folder(d, n: int):
    for k in range(n):
        write_run(d, WALL_US + k * APART_US, 1000 + 10 * k, world=WORLD)
    return d


def _counted(monkeypatch, d):
    calls = {"span": 0, "complete": 0}
    span, complete = runs_mod._span, runs_mod.complete

    def counted_span(o):
        calls["span"] += 1
        return span(o)

    def counted_complete(run):
        calls["complete"] += 1
        return complete(run)

    monkeypatch.setattr(runs_mod, "_span", counted_span)
    monkeypatch.setattr(runs_mod, "complete", counted_complete)
    out = analyze_runs(str(d), jobs=1, rules=False, run="all")
    monkeypatch.undo()
    return out, calls


@pytest.mark.parametrize("n", [4, 16])
def test_run_all_describes_each_run_once(tmp_path, monkeypatch, n):
    out, calls = _counted(monkeypatch, _folder(tmp_path / "runs", n))
    files = n * WORLD
    assert len(out) == n
    # a span per file to group them and one to describe them; a completeness test per run (before: n × files
    # spans and n × n completeness tests: 40 and 16 at 4 runs, 544 and 256 at 16)
    assert calls == {"span": 2 * files, "complete": n}, calls
    for k, a in enumerate(out):  # each summary still names every run, with its own marked analysed
        assert [r.number for r in a.runs] == list(range(1, n + 1))
        assert [r.analysed for r in a.runs] == [j == k for j in range(n)]
        assert [r.ranks for r in a.runs] == [list(range(WORLD))] * n
        assert [r.pids for r in a.runs] == [[1000 + 10 * j + r for r in range(WORLD)] for j in range(n)]
    runs_of = {id(r) for a in out for r in a.runs}
    assert len(runs_of) == 2 * n  # the entries are shared: one per run, and one marked copy per analysis


def test_the_warning_is_the_same_line_for_each_run(tmp_path, monkeypatch):
    """The line each analysis carries, against the text written here from the folder's own layout."""
    n = 10
    out, _ = _counted(monkeypatch, _folder(tmp_path / "runs", n))
    for k, a in enumerate(out):
        line = a.issues[0].message
        assert line.startswith(f"the input holds {n} captures of the same processes") or \
            line.startswith(f"the input holds {n} runs"), line
        assert f"Analysed run {k + 1}{' (the newest)' if k == n - 1 else ''}; `--run {2 if k == 0 else 1}` " in line
        assert f"run {k + 1}: {WORLD} files, ranks 0-1 of {WORLD}" in line and f"run {n}: " in line
        assert orjson.loads(orjson.dumps(a.issues[0].message)) == line
