"""Sizes a user controls, bounded before the work (issue 35, medium 2, 5, 8 and the low list).

Before: `--ranks 0-200000000` built the whole list (3 GB, then a MemoryError traceback), a 5,000-digit rank or
`--run` and `--run ²` were ValueError tracebacks, a 1,000-level `args` or `distributedInfo` the parser accepts
was a RecursionError in the timeline (and in the summary, from a manifest), a rank's 1,000th source process
shared a pid with its 999th, a Megatron op table with one op at step 2^62 was a MemoryError, and the Python
API raised TypeError on a pathlib.Path and called a bad comm_regex an internal error of every rank.
"""

from __future__ import annotations

import json
import pathlib

import orjson
import pytest

from llmdiag.diagnose.errors import LlmdiagError
from tests.adversarial.conftest import attack, check
from tests.gen.builder import gpu_rank

BIG = "9" * 5000


@pytest.mark.parametrize("spec, words", [("0-200000000", "200000000"), (BIG, "5000 characters"),
                                         (f"0-{BIG}", "5000 characters"), ("²", "²"), ("0-1048576", "1048577 rank(s)")])
def test_ranks_are_ranges_and_numbers_are_read_by_digit_count(tmp_path, run, spec, words):
    r = attack("analyze", run, "-q", "--no-report", "--json", tmp_path / "s.json", "--timeline", tmp_path / "t.json",
               "--ranks", spec, cwd=tmp_path)
    check(r, 2, "--ranks", words)
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("spec", ["²", BIG, "0", "-1", "1.0"])
def test_run_is_read_by_digit_count(tmp_path, run, spec):
    r = attack("analyze", run, "-q", "--no-report", "--json", tmp_path / "s.json", "--run", spec, cwd=tmp_path)
    check(r, 2, "--run", "is not newest, all or a run number")
    assert len(r.lines[0]) < 300


def _nested(depth: int, leaf="1") -> str:
    return "[" * depth + leaf + "]" * depth


@pytest.mark.parametrize("where", ["args", "distributedInfo"])
def test_deeply_nested_trace_values_are_cut_in_the_timeline(tmp_path, where):
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        doc = gpu_rank(r, world_size=2).to_dict()
        if where == "args":
            doc["traceEvents"][3].setdefault("args", {})["deep"] = "@DEEP@"
        else:
            doc["distributedInfo"]["deep"] = "@DEEP@"
        (d / f"rank{r}.json").write_text(json.dumps(doc).replace('"@DEEP@"', _nested(1000)))
    out = tmp_path / "t.json"
    r = attack("analyze", d, "-q", "--json", tmp_path / "s.json", "--report", tmp_path / "r.html", "--timeline", out,
               cwd=tmp_path)
    check(r, 0, one_line=False)
    tl = orjson.loads(out.read_bytes())  # valid JSON, the deep part cut with a marker
    assert "nested deeper than 200 levels" in out.read_text()
    assert len(tl["traceEvents"]) > 10


def test_a_deeply_nested_manifest_is_one_line(tmp_path, run):
    (run / "manifest.json").write_text('{"schema_version": 1, "status": "ok", "junk": ' + _nested(1000) + "}")
    (run / "traces").mkdir()
    for f in ("rank0.json", "rank1.json"):
        (run / f).rename(run / "traces" / f)
    r = attack("analyze", run, "-q", "--json", tmp_path / "s.json", "--report", tmp_path / "r.html", cwd=tmp_path)
    check(r, 2, "manifest.json", "nests deeper than 200 levels")


def test_a_deeply_nested_summary_is_one_line(tmp_path, run):
    s = tmp_path / "s.json"
    check(attack("analyze", run, "-q", "--no-report", "--json", s, cwd=tmp_path), 0, one_line=False)
    doc = json.loads(s.read_text())
    doc["ranks"][0]["coords"] = {"x": "@DEEP@"}
    (tmp_path / "deep.json").write_text(json.dumps(doc).replace('"@DEEP@"', _nested(600)))
    check(attack("diff", s, tmp_path / "deep.json", "--json", tmp_path / "d.json", cwd=tmp_path), 2, "deep.json",
          "nests deeper")
    check(attack("check", tmp_path / "deep.json", "--max-bubble", "90%", cwd=tmp_path), 2, "deep.json", "nests deeper")


def test_source_processes_past_the_999th_keep_pids_of_their_own(tmp_path):
    from llmdiag.diagnose.export.passthrough import PID_STRIDE, merged_pid

    pids = {merged_pid(r, j, 4) for r in range(4) for j in range(2500)}
    assert len(pids) == 4 * 2500  # unique (before: every process past the 998th shared one pid per rank)
    assert {p // PID_STRIDE % 4 for p in (merged_pid(3, j, 4) for j in range(2500))} == {3}
    assert not pids & {r * PID_STRIDE for r in range(4)}  # never a rank's own llmdiag pid
    d = tmp_path / "run"
    b = gpu_rank(0, world_size=1)
    for p in range(1200):
        b.raw({"ph": "X", "name": "x", "pid": 10_000 + p, "tid": 1, "ts": b._abs(10), "dur": 1, "cat": "cpu_op"})
    b.write(d / "rank0.json")
    out = tmp_path / "t.json"
    check(attack("analyze", d, "-q", "--no-report", "--json", tmp_path / "s.json", "--timeline", out, cwd=tmp_path),
          0, one_line=False)
    tl = orjson.loads(out.read_bytes())
    xs = [e["pid"] for e in tl["traceEvents"] if e.get("name") == "x"]
    assert len(xs) == 1200 and len(set(xs)) == 1200


def test_a_megatron_op_at_step_2_to_the_62(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("yaml")
    from tests.adversarial.test_adv_op_table import columns, table

    steps = [0, 0, 0, 2**62, 2**62, 2**62, 0, 0, 0, 1, 1, 1]
    assert len(steps) == len(columns()["step"])
    r = attack("analyze", table(tmp_path / "t", step=steps), "-q", "--json", tmp_path / "s.json", "--report",
               tmp_path / "r.html", cwd=tmp_path)
    check(r, 0, one_line=False)
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert 2**62 in [x["step"] for x in s["ranks"][0]["steps"]]


def test_the_python_api_takes_a_path_and_refuses_a_bad_comm_regex(run):
    import llmdiag

    a = llmdiag.analyze_path(pathlib.Path(run), jobs=1)
    assert len(a.ranks) == 2
    assert len(llmdiag.analyze_path([pathlib.Path(run / "rank0.json"), run / "rank1.json"], jobs=1).ranks) == 2
    with pytest.raises(LlmdiagError, match="--comm-regex is not a valid regular expression"):
        llmdiag.analyze_path(run, comm_regex="(", jobs=1)
