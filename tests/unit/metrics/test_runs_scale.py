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


def test_summaries_of_many_runs_list_a_bounded_number_each(tmp_path, monkeypatch):
    """Above MAX_RUN_ROWS runs a summary lists the two oldest, its own and the newest: R summaries hold O(R)
    entries (R each before: `--run all` output quadratic in runs). The gate reads the count from the newest
    entry, the last: a cut list is refused, gated and named as the whole one was. MAX_RUN_ROWS is lowered to 6
    here so that 10 runs cross it."""
    from click.testing import CliRunner

    from llmdiag.diagnose.cli.main import main as cli_main
    from llmdiag.diagnose.model import runs as model_runs

    monkeypatch.setattr(model_runs, "MAX_RUN_ROWS", 6)
    n = 10
    d = _folder(tmp_path / "runs", n)
    out = tmp_path / "out" / "s.json"
    res = CliRunner().invoke(cli_main, ["analyze", str(d), "--no-report", "-q", "-j", "1", "--run", "all",
                                        "--json", str(out)])
    assert res.exit_code == 0, res.output
    listed = 0
    for k in range(1, n + 1):
        runs = orjson.loads((tmp_path / "out" / f"s-run{k}.json").read_bytes())["runs"]
        want = sorted({1, 2, k, 8, 9, 10})  # the two oldest, this one, the newest 6 - 3
        assert [r["number"] for r in runs] == want and [r["number"] for r in runs if r["analysed"]] == [k]
        listed += len(runs)
    assert listed <= 6 * n  # 100 entries before
    s3 = tmp_path / "out" / "s-run3.json"
    warning = orjson.loads(s3.read_bytes())["issues"][0]["message"]
    assert "run 3: 2 files" in warning and "… 2 more runs (the summary's `runs` lists 6 of them)" in warning, warning

    def check(*args):
        return CliRunner().invoke(cli_main, ["check", str(s3), "--max-step-time-ms", "1000", *args])

    r = check()
    assert r.exit_code == 2 and "holds 10 runs; the newest, run 10, is complete" in r.output, r.output
    r = check("--run", "newest")
    assert r.exit_code == 2 and "describes run 3 of the 10 its input held, not run 10" in r.output, r.output
    r = check("--run", "3")
    assert r.exit_code == 0 and "gated run 3 of the 10 runs" in r.output, r.output
    r = check("--run", "11")
    assert r.exit_code == 2 and "holds 10 runs (1-10" in r.output, r.output
