"""Issue 29's reproductions against the project's own baseline: a metric that vanishes on some ranks fails
every aggregation, limits a gate could never exceed are refused, and the 'runs were made differently' note
cannot smuggle workflow commands, terminal escapes or control bytes into any sink.

The sides are baselines/dp2-cpu.json and copies of it edited the way the issue describes, run through the
`llmdiag check` command itself.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.gate import check

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "baselines" / "dp2-cpu.json"
GATES = ROOT / "baselines" / "gates.toml"


def run(*args, env=None):
    r = CliRunner().invoke(check, [str(a) for a in args], env=env or {"GITHUB_ACTIONS": ""})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    return r


@pytest.fixture(scope="module")
def base() -> dict:
    return json.loads(BASE.read_text())


def write(tmp_path, name, summary) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(summary))
    return p


def test_the_baseline_passes_against_itself(tmp_path, base):
    """The control: the unedited copy passes every route below, so each failure is the edit's."""
    cur = write(tmp_path, "cur.json", base)
    for extra in (["--agg", "mean"], ["--agg", "rank"], ["--config", GATES], []):
        r = run(cur, "--baseline", BASE, *extra)
        assert r.exit_code == 0, (extra, r.output)


@pytest.mark.parametrize("edit", ["overlap_null", "memory_empty", "rank_dropped"])
@pytest.mark.parametrize("route", [["--agg", "mean"], ["--agg", "rank"], ["--agg", "worst"], ["--config", GATES],
                                   ["--max-exposed-comm-rise", "0.5", "--max-overlap-drop", "0.5",
                                    "--max-memory-rise", "50%", "--agg", "mean"]])
def test_metric_vanished_on_one_rank_fails(tmp_path, base, edit, route):
    """Issue 29 high 1: overlap null (or memory []) on rank 1 used to print `PASS: 4 gates`: the mean was taken
    over rank 0 alone."""
    cur = copy.deepcopy(base)
    r1 = cur["ranks"][1]
    if edit == "overlap_null":
        r1["overlap_ratio"] = None
    elif edit == "memory_empty":
        r1["memory"] = []
    else:
        del cur["ranks"][1]
    gated = {"overlap_null": "overlap_ratio", "memory_empty": "memory_peak", "rank_dropped": None}[edit]
    path = write(tmp_path, "cur.json", cur)
    r = run(path, "--baseline", BASE, *route)
    assert r.exit_code == 1, r.output
    said = " ".join(r.output.split())  # prose wraps at the terminal's width
    if gated:
        assert f"current: {gated} is undefined on ranks 1, where the baseline has it" in said
        allowed = run(path, "--baseline", BASE, *route, "--allow-undefined")  # allowed by name: then rank 0 alone
        assert allowed.exit_code == 0 and "allowed by --allow-undefined" in " ".join(allowed.output.split()), \
            allowed.output
    else:
        assert "1 of 2 ranks have no analysed trace (ranks 1)" in said


def test_baseline_with_a_hole_fails_too(tmp_path, base):
    """A baseline edited the same way: the comparison would be over other ranks than the current run's."""
    hole = copy.deepcopy(base)
    hole["ranks"][1]["overlap_ratio"] = None
    r = run(write(tmp_path, "cur.json", base), "--baseline", write(tmp_path, "hole.json", hole), "--agg", "mean")
    assert r.exit_code == 1 and "baseline: overlap_ratio is undefined on ranks 1 and defined on ranks 0" in r.output


def test_exposed_comm_null_is_an_input_error(tmp_path, base):
    """`exposed_comm_frac` is always defined (0 without communication): null there is a broken summary, exit 2."""
    cur = copy.deepcopy(base)
    cur["ranks"][1]["exposed_comm_frac"] = None
    r = run(write(tmp_path, "cur.json", cur), "--baseline", BASE, "--agg", "mean")
    assert r.exit_code == 2 and "ranks.1.exposed_comm_frac is missing" in r.output


def test_rank_listed_twice_fails(tmp_path, base):
    cur = copy.deepcopy(base)
    stray = copy.deepcopy(cur["ranks"][0])
    stray["rank"] = 1
    cur["ranks"].append(stray)
    r = run(write(tmp_path, "cur.json", cur), "--baseline", BASE, "--agg", "mean")
    assert r.exit_code == 1 and "ranks 1 appear more than once" in r.output


@pytest.mark.parametrize("args", [["--max-exposed-comm-rise", "5"], ["--max-overlap-drop", "10"],
                                  ["--max-bubble", "20"], ["--min-overlap", "1.5"], ["--max-bubble", "101%"],
                                  ["--max-overlap-drop", "150%"], ["--max-exposed-comm", "-0.1"]])
def test_limits_that_can_never_fail_are_refused(tmp_path, base, args):
    """Issue 29 high 2: a ratio limit above 1 (or 100 %) and a relative drop above 100 % can never be exceeded."""
    r = run(write(tmp_path, "cur.json", base), "--baseline", BASE, *args)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith("llmdiag: ")


@pytest.mark.parametrize("toml", ['[exposed_comm]\nmax_rise = 5\n', '[overlap_ratio]\nmin = "120%"\n',
                                  '[bubble]\nmax_drop = "200%"\n'])
def test_config_limits_are_validated_as_flags_are(tmp_path, base, toml):
    cfg = tmp_path / "g.toml"
    cfg.write_text(toml)
    r = run(write(tmp_path, "cur.json", base), "--baseline", BASE, "--config", cfg)
    assert r.exit_code == 2 and str(cfg) in r.output, r.output


def test_limits_at_the_edge_of_their_range_are_accepted(tmp_path, base):
    cur = write(tmp_path, "cur.json", base)
    assert run(cur, "--baseline", BASE, "--max-overlap-drop", "1", "--max-exposed-comm", "100%").exit_code == 0
    assert run(cur, "--baseline", BASE, "--max-step-time-rise", "500%").exit_code == 0  # a rise has no upper bound


EVIL = "dp2\n::error::pwned\n::stop-commands::tok\x1b]52;c;ZXZpbA==\x07\x00\x0b\u202e<img src=x>|*"


def test_manifest_strings_escaped_at_every_sink(tmp_path, base):
    """Issue 29 medium: the 'runs were made differently' note quoted the manifest raw."""
    cur = copy.deepcopy(base)
    cur["manifest"]["workload"] = EVIL
    cur["manifest"]["options"]["bucket_cap_mb"] = EVIL
    summary_md, junit = tmp_path / "step.md", tmp_path / "out.xml"
    r = run(write(tmp_path, "cur.json", cur), "--baseline", BASE, "--config", GATES, "--junit", junit,
            env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary_md)})
    assert r.exit_code == 0, r.output
    assert "the runs were made differently" in r.output
    for line in r.output.splitlines():  # no line a runner would take as a command, other than our own
        assert not line.lstrip().startswith("::") or line.startswith(("::notice title=llmdiag",
                                                                       "::error title=llmdiag",
                                                                       "::warning title=llmdiag"))
    assert "\\n::stop-commands::tok" in r.output  # quoted, on the note's own line
    assert not any(c in r.output for c in "\x1b\x07\x00\x0b\u202e")
    root = ET.parse(junit).getroot()  # well-formed XML 1.0
    notes = [p.get("value") for p in root.iter("property") if p.get("name", "").startswith("note")]
    assert any("\\x1b]52" in n and "\\x00" in n and "\\n::error::pwned" in n for n in notes), notes
    assert all("\n" not in n for n in notes)  # a property is one line: a log printing it starts no command
    md = summary_md.read_text()
    assert "<img" not in md and "&lt;img src=x\\>" in md and "\\|\\*" in md
    assert not any(c in md for c in "\x1b\x07\x00\x0b\u202e")


def test_diff_escapes_the_same_strings(tmp_path, base):
    from llmdiag.diagnose.cli.gate import diff

    cur = copy.deepcopy(base)
    cur["manifest"]["workload"] = EVIL
    cur["name"] = EVIL
    r = CliRunner().invoke(diff, [str(BASE), str(write(tmp_path, "cur.json", cur))])
    assert r.exit_code == 0, r.output
    assert not any(c in r.output for c in "\x1b\x07\x00\x0b\u202e")
    assert not any(line.lstrip().startswith("::") for line in r.output.splitlines())
