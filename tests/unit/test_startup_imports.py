"""What the whole command (`analyze PATH --json J --report R`, as benchmarks/whole_command.py times it) imports
on a one-rank input (issue 37): on the small real traces a process's fixed cost is most of its time, so a module
imported and never used is waste. Each case runs the real command line in a fresh interpreter and reads its
`sys.modules` afterwards (the companion of tests/unit/cli/test_imports.py, which covers `--no-report`).

- `numpy.ma` (~7 ms): numpy imports it on the first `np.median`, or `np.unique` without index/inverse/counts;
  the metrics take metrics/rank/sets.py's `median` / `distinct` instead (same values). The generated trace
  does not reach every such call, so the real traces are read too.
- the stragglers' and matching's types (model/skew.py, model/matching.py): the report's views name
  `Straggler` only as a type; a one-rank report has none to show.
- `difflib` (~1.3 ms with its "did you mean" search): click tries `-q` as a long option first, and the miss built
  a `NoSuchOption` that compared `-q` with every long option; cli/main.py's parsers match short options as long.
- `statistics` (~3 ms with fractions): model/stats.py gives its two functions and imports the module for any
  other name; the import system's own `__path__` look-up (every `from ..model.stats import median`) imported it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REAL
from tests.unit.cli.test_imports import _modules, _under  # one fresh-interpreter probe for both files
from tests.gen.builder import gpu_rank

REPO = Path(__file__).resolve().parents[2]
D = "llmdiag.diagnose"
# Not on a one-rank `analyze --json --report`: see the module's doc.
NOT_IMPORTED = ("numpy.ma", "difflib", f"{D}.model.skew", f"{D}.model.matching", f"{D}.metrics.job.skew",
                f"{D}.metrics.job.collective_match")


def _whole(tmp_path: Path, trace: Path | str) -> set[str]:
    mods = _modules(tmp_path, "analyze", str(trace), "-q", "-j", "1", "--json", str(tmp_path / "s.json"),
                    "--report", str(tmp_path / "r.html"))
    # the whole command did run: the analysis, the rules and the report (a run that imported nothing would pass)
    assert {f"{D}.metrics.rank.per_rank", f"{D}.rules", "llmdiag.reports.render", f"{D}.model.views"} <= mods
    assert json.loads((tmp_path / "s.json").read_text())["ranks"] and (tmp_path / "r.html").stat().st_size
    return mods


def test_one_rank_report_imports_no_straggler_types_and_no_numpy_ma(tmp_path):
    gpu_rank(0, world_size=1).write(tmp_path / "run" / "rank0.json")
    assert _under(_whole(tmp_path, tmp_path / "run"), NOT_IMPORTED) == []


@pytest.mark.real("hta/nccl_data.json.gz", "hta/ns_resolution_rank-0.pt.trace.json.gz")
@pytest.mark.parametrize("name", ["nccl_data.json.gz", "ns_resolution_rank-0.pt.trace.json.gz"])
def test_small_real_traces_whole_command_imports_no_numpy_ma(tmp_path, name):
    """nccl_data and ns_resolution reach the elementwise median, the host-ahead walk and (ns_resolution) the
    simulation's medians: each imported numpy.ma through np.median / np.unique before."""
    assert _under(_whole(tmp_path, os.path.join(REAL, "hta", name)), NOT_IMPORTED) == []


@pytest.mark.real("hta/sampled_pair")
def test_two_ranks_whole_command_imports_no_statistics_and_no_numpy_ma(tmp_path):
    """sampled_pair's cross-rank parts (skew, collective matching) import model/stats.py's median by name."""
    mods = _whole(tmp_path, os.path.join(REAL, "hta", "sampled_pair"))
    assert f"{D}.metrics.job.collective_match" in mods  # the part that imports stats' median by name did run
    assert _under(mods, ["statistics", "numpy.ma"]) == []


def test_a_name_imported_from_model_stats_loads_no_statistics():
    code = ("import sys\nfrom llmdiag.diagnose.model.stats import fmean, median\n"
            "from llmdiag.diagnose.model import stats\nassert 'statistics' not in sys.modules\n"
            "assert stats.pstdev([1.0, 3.0]) == 1.0 and 'statistics' in sys.modules  # other names: the module's")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr


def test_analyze_raises_the_collectors_first_threshold(tmp_path):
    """The cyclic collector's passes over young objects cost 25-40 ms of a small trace's run and found ~300
    objects in cycles (diagnose/cli/analyze.py GC_YOUNG): the command runs with the higher threshold, so a small
    input sees almost no pass once it started (the summary is still whole)."""
    from llmdiag.diagnose.cli.analyze import GC_YOUNG

    gpu_rank(0, world_size=1).write(tmp_path / "run" / "rank0.json")
    code = ("import gc, json, runpy, sys\nraised = []\n"
            "gc.callbacks.append(lambda p, i: p == 'start' and gc.get_threshold()[0] > 700 and raised.append(i))\n"
            "sys.argv = ['llmdiag', *json.loads(sys.argv[1])]\n"
            "try:\n    from llmdiag.diagnose.cli.main import main\n    main()  # not entry(): it leaves by os._exit\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('GC', json.dumps([gc.get_threshold(), len(raised)]))")
    argv = ["analyze", str(tmp_path / "run"), "-q", "-j", "1", "--json", str(tmp_path / "s.json"),
            "--report", str(tmp_path / "r.html")]
    p = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    (threshold, passes) = json.loads(p.stdout.split("GC ", 1)[1])
    assert threshold[0] == GC_YOUNG == 100_000 and threshold[1:] == [10, 10]
    assert passes <= 3
    assert json.loads((tmp_path / "s.json").read_text())["ranks"][0]["rank"] == 0


def test_short_options_parse_as_their_long_names_and_a_typo_still_gets_suggestions():
    """The parsers' short options also matched as long ones (no `NoSuchOption` for `-q`) give what the long
    names give; a grouped short flag and an unknown option behave as click's own parser does."""
    import click

    from llmdiag.diagnose.cli.main import main

    ctx = click.Context(main)
    cmd = main.get_command(ctx, "analyze")
    assert cmd is not None

    def parse(*argv: str) -> dict:
        sub = click.Context(cmd, info_name="analyze", parent=ctx)
        opts, _, _ = cmd.make_parser(sub).parse_args(list(argv))
        return opts

    want = parse("--quiet", "--jobs", "3", "t")
    assert want["quiet"] is True and want["jobs"] == "3"
    assert parse("-q", "-j", "3", "t") == parse("-qj3", "t") == parse("-j3", "-q", "t") == want
    with pytest.raises(click.NoSuchOption, match="-x"):
        parse("-q", "-x", "t")
    with pytest.raises(click.NoSuchOption) as typo:  # "did you mean": difflib where a long name is wrong
        parse("--jsn", "x", "t")
    assert "'--json'" in typo.value.format_message()
