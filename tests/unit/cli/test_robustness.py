"""Robustness: bad traces, broken runs and hostile strings never crash or lie.

Every case puts one bad file beside two good ranks (0 and 1 of a world of 3) and runs the real command
line (`llmdiag analyze --no-report -q --json ...`). It checks:
- the exit code: 0 all analysed, 1 some files left out (each named on stderr), 2 nothing usable / usage;
- stderr: only one-line messages `llmdiag: <file>: <what> (<hint>)`, never a traceback;
- the good ranks' numbers in the JSON summary are exactly those of the good ranks analysed alone.
docs/robustness.md lists the cases and what llmdiag does for each.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.main import main as cli_main
from llmdiag.diagnose.errors import LlmdiagError
from tests.gen.builder import TraceBuilder, gpu_rank

WORLD = 3
REPO = Path(__file__).resolve().parents[3]
LINE = re.compile(r"^llmdiag: (?P<file>.+?): (?P<what>.+?)(?: \((?P<hint>[^()]*(?:\([^()]*\))?[^()]*)\))?$")


class Run:
    def __init__(self, res, summary):
        self.code = res.exit_code
        self.out = res.stdout
        self.err = res.stderr
        self.exception = res.exception
        self.summary = summary

    @property
    def lines(self) -> list[str]:
        return [x for x in self.err.splitlines() if x.strip()]

    def ranks(self) -> dict[int, dict]:
        return {r["rank"]: r for r in self.summary["ranks"]}

    def issues(self, severity=None) -> list[dict]:
        return [i for i in self.summary["issues"] if severity is None or i["severity"] == severity]


def cli(tmp_path, *paths, quiet=True, extra=()) -> Run:
    out = tmp_path / "summary.json"
    if out.exists():
        out.unlink()
    args = ["analyze", *map(str, paths), "--no-report", "--json", str(out), "-j", "1", *extra]
    if quiet:
        args.append("-q")
    res = CliRunner().invoke(cli_main, args)
    r = Run(res, orjson.loads(out.read_bytes()) if out.exists() else None)
    # never a traceback, never an exception escaping click
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.err and "Traceback" not in r.out
    assert "internal error" not in r.err, r.err  # the per-rank fault boundary caught a bug: still a failure here
    for line in r.lines:  # usage errors have no file: `llmdiag: <what> (<hint>)`
        assert line.startswith("llmdiag: "), f"not an llmdiag message: {line!r}"
        assert "\x1b" not in line and "\r" not in line
    return r


def good_folder(tmp_path, name="run") -> Path:
    d = tmp_path / name
    for r in (0, 1):
        gpu_rank(r, world_size=WORLD).write(d / f"rank{r}.json")
    return d


def _numbers(rank: dict) -> dict:
    """The rank's own numbers. Its clock shift places it on the job's common clock, whose origin is the earliest
    rank's: a neighbour with absurd timestamps moves that origin (every rank by the same ns), not the rank."""
    return {k: v for k, v in rank.items() if k not in ("file", "warnings", "clock_shift_ns")}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict[int, dict]:
    """The good ranks analysed alone, as the JSON summary holds them."""
    d = good_folder(tmp_path_factory.mktemp("baseline"))
    a = analyze_path(str(d), rules=False, jobs=1)
    s = orjson.loads(orjson.dumps(a.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))
    return {r["rank"]: _numbers(r) for r in s["ranks"]}


def assert_good_unchanged(run: Run, baseline):
    ranks = run.ranks()
    for r in (0, 1):
        assert r in ranks, f"good rank {r} missing"
        assert _numbers(ranks[r]) == baseline[r], f"rank {r} changed by its bad neighbour"
        assert ranks[r]["warnings"] == [], ranks[r]["warnings"]


def with_bad(tmp_path, fname: str, content) -> Path:
    d = good_folder(tmp_path)
    p = d / fname
    if isinstance(content, TraceBuilder):
        content.write(p)
    else:
        p.write_bytes(content)
    return d


def left_out(run: Run, fname: str, what: str, hint: str | None = None):
    """Exit 1, the bad file named on stderr in one line with `what` (and `hint`), good ranks analysed."""
    assert run.code == 1, (run.code, run.err)
    mine = [x for x in run.lines if fname in x]
    assert len(mine) == 1, run.err
    m = LINE.match(mine[0])
    assert m and m["file"].endswith(fname) and what in mine[0][len("llmdiag: ") + len(m["file"]):], mine[0]
    if hint:
        assert m["hint"] and hint in m["hint"], mine[0]
    errs = run.issues("error")
    assert len(errs) == 1 and errs[0]["file"].endswith(fname)


def rank2(**kw) -> TraceBuilder:
    return gpu_rank(2, world_size=WORLD, **kw)


# ------------------------------------------------------------------------------------------ unreadable input


def test_truncated_json(tmp_path, baseline):
    data = rank2().to_bytes()
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", data[: len(data) // 2]))
    left_out(run, "rank2.json", "truncated JSON", "re-export")
    assert_good_unchanged(run, baseline)


def test_truncated_gzip(tmp_path, baseline):
    data = gzip.compress(rank2().to_bytes())
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json.gz", data[: len(data) // 2]))
    left_out(run, "rank2.json.gz", "corrupt gzip data", "re-copy")
    assert_good_unchanged(run, baseline)


def test_corrupt_gzip(tmp_path, baseline):
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json.gz", b"\x1f\x8b" + bytes(range(256)) * 4))
    left_out(run, "rank2.json.gz", "corrupt gzip data")
    assert_good_unchanged(run, baseline)


@pytest.mark.parametrize("content", [b"", b"  \n\t ", gzip.compress(b"")], ids=["zero-bytes", "blank", "empty-gzip"])
def test_empty_file(tmp_path, baseline, content):
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", content))
    left_out(run, "rank2.json", "empty file", "died before writing")
    assert_good_unchanged(run, baseline)


@pytest.mark.parametrize(
    "content, what",
    [
        (b'{"name": "not a trace", "values": [1, 2, 3]}', "not a Kineto trace (no traceEvents)"),
        (b'"just a string"', "not a Kineto trace (top level is not an object)"),
        (b"12345", "not a Kineto trace (top level is not an object)"),
        (b'{"traceEvents": {"ph": "X"}}', "traceEvents is not a list"),
        (b"[1, 2, 3]", "no events to analyse"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "invalid JSON"),
    ],
    ids=["object", "string", "number", "events-object", "array-of-numbers", "binary"],
)
def test_json_that_is_not_a_kineto_trace(tmp_path, baseline, content, what):
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", content))
    left_out(run, "rank2.json", what)
    assert_good_unchanged(run, baseline)


def test_missing_trace_events(tmp_path, baseline):
    content = orjson.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 2, "world_size": WORLD}})
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", content))
    left_out(run, "rank2.json", "no traceEvents", "torch.profiler")
    assert_good_unchanged(run, baseline)


def test_trace_with_no_complete_events(tmp_path, baseline):
    b = TraceBuilder(rank=2, world_size=WORLD)
    b.instant("Iteration Start: PyTorch Profiler", 0)
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    left_out(run, "rank2.json", "no events to analyse")
    assert_good_unchanged(run, baseline)


# ------------------------------------------------------------------------------------------ rank identity


def test_missing_distributed_info_rank_from_file_name(tmp_path, baseline):
    b = rank2()
    b.distributed = False
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0 and run.lines == []
    assert set(run.ranks()) == {0, 1, 2}
    (w,) = [i for i in run.issues() if i["file"].endswith("rank2.json")]
    assert w["severity"] == "warning" and "rank 2 taken from the file name" in w["message"]
    assert_good_unchanged(run, baseline)
    # built like rank 0; its backend is unknown: the backend is distributedInfo's, which this trace lacks
    same_shape = {k: v for k, v in _numbers(run.ranks()[2]).items() if k not in ("rank", "backend")}
    assert same_shape == {k: v for k, v in baseline[0].items() if k not in ("rank", "backend")}
    assert run.ranks()[2]["backend"] == ""


def test_missing_distributed_info_and_no_rank_in_name(tmp_path, baseline):
    b = rank2()
    b.distributed = False
    run = cli(tmp_path, with_bad(tmp_path, "trace_from_somewhere.json", b))
    assert run.code == 0
    assert set(run.ranks()) == {0, 1, 2}
    msgs = [i["message"] for i in run.issues() if i["file"].endswith("trace_from_somewhere.json")]
    assert any("no rank in distributedInfo, manifest or file name" in m for m in msgs)
    assert any("numbered rank 2 by file order" in m for m in msgs)
    assert_good_unchanged(run, baseline)


@pytest.mark.parametrize("bad_rank", ["2", -1, True, None, 2.0], ids=["string", "negative", "bool", "null", "float"])
def test_malformed_rank_falls_back_to_file_name(tmp_path, baseline, bad_rank):
    b = rank2()
    b.extra["distributedInfo"] = {"rank": bad_rank, "world_size": WORLD, "backend": "nccl"}
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    assert set(run.ranks()) == {0, 1, 2}
    assert any("taken from the file name" in i["message"] for i in run.issues())
    assert_good_unchanged(run, baseline)


def test_contradictory_rank_outside_world(tmp_path, baseline):
    """distributedInfo says rank 7 of a world of 3: it cannot be placed, so it is left out, not renumbered."""
    b = gpu_rank(7, world_size=WORLD)
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    left_out(run, "rank2.json", "rank 7 is outside the world of 3 ranks")
    assert set(run.ranks()) == {0, 1}
    assert_good_unchanged(run, baseline)


def test_trace_of_a_different_job(tmp_path, baseline):
    """A trace whose world size disagrees with the others belongs to another job."""
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", gpu_rank(2, world_size=8)))
    left_out(run, "rank2.json", "trace of a different job (world size 8, the others 3)")
    assert set(run.ranks()) == {0, 1}
    assert_good_unchanged(run, baseline)


def test_duplicate_ranks_that_disagree_are_all_left_out(tmp_path, baseline):
    d = good_folder(tmp_path)
    rank2().write(d / "rank2.json")
    other = rank2()
    other.kernel("void other_kernel()", 650, 100, stream=8, launch_at=12)  # different numbers: which is right?
    other.write(d / "rank2_copy.json")
    run = cli(tmp_path, d)
    assert run.code == 1
    dup = [x for x in run.lines if "rank 2 appears in 2 files" in x]
    assert len(dup) == 2 and any("rank2.json:" in x for x in dup) and any("rank2_copy.json:" in x for x in dup)
    assert set(run.ranks()) == {0, 1}
    assert run.summary["ranks_missing"] == [2]
    assert_good_unchanged(run, baseline)


def test_identical_duplicate_keeps_one_and_records_it(tmp_path, baseline):
    """A copy of a rank's trace (same numbers) is resolved: one kept, the other named, the rank recorded in
    ranks_duplicate (so `check` fails unless --allow-duplicate-ranks)."""
    d = good_folder(tmp_path)
    rank2().write(d / "rank2.json")
    rank2().write(d / "rank2_copy.json")
    run = cli(tmp_path, d)
    assert run.code == 0, run.err
    assert set(run.ranks()) == {0, 1, 2} and run.summary["ranks_duplicate"] == [2]
    (w,) = [i for i in run.issues("warning") if "appears in 2 files" in i["message"]]
    assert w["file"].endswith("rank2_copy.json") and "kept (they give identical numbers)" in w["message"]
    assert_good_unchanged(run, baseline)


def test_two_jobs_in_one_folder_keep_their_rank_0(tmp_path):
    """A V100 job of 2023 and a B200 job of 2025, both with ranks 0 and 1 (and the B200 job a rank 2): the
    larger job is analysed with its rank 0, the other job's traces are named with the reason, never both
    rank-0 files dropped as duplicates."""
    d = tmp_path / "mixed"
    v100 = [{"id": 0, "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 32 << 30, "computeMajor": 7, "computeMinor": 0}]
    b200 = [{"id": 0, "name": "NVIDIA B200", "totalGlobalMem": 180 << 30, "computeMajor": 10, "computeMinor": 0}]
    for r in (0, 1):
        gpu_rank(r, world_size=3, base_us=1_690_000_000_000_000, device_properties=v100).write(d / f"v100_rank{r}.json")
    for r in (0, 1, 2):
        gpu_rank(r, world_size=3, base_us=1_750_000_000_000_000, device_properties=b200).write(d / f"b200_rank{r}.json")
    run = cli(tmp_path, d)
    assert run.code == 1
    assert sorted(run.ranks()) == [0, 1, 2] and all("b200" in r["file"] for r in run.summary["ranks"])
    other = [x for x in run.lines if "trace of another job" in x]
    assert len(other) == 2 and all("v100_rank" in x and "2023-" in x and "2025-" in x for x in other), run.err
    assert all("llmdiag analyze" in x for x in other)
    assert not any("appears in" in x for x in run.lines)
    assert run.summary["ranks_missing"] == []


def test_one_job_with_mixed_device_names_stays_one_job(tmp_path):
    """Two GPU models in one job (no rank claimed twice, clocks together): nothing is left out."""
    d = tmp_path / "mixed"
    for r, name in ((0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA H100 PCIe")):
        gpu_rank(r, world_size=2, device_properties=[{"id": 0, "name": name, "totalGlobalMem": 80 << 30}]).write(
            d / f"rank{r}.json")
    run = cli(tmp_path, d)
    assert run.code == 0 and sorted(run.ranks()) == [0, 1], run.err


def test_a_trace_from_years_earlier_is_another_job(tmp_path):
    """Wall clocks from an epoch ts (older Kineto) or from baseTimeNanoseconds (newer: ts is monotonic)."""
    d = tmp_path / "run"
    gpu_rank(0, world_size=3, base_us=1_750_000_000_000_000).write(d / "rank0.json")  # epoch µs, 2025
    gpu_rank(1, world_size=3, extra={"baseTimeNanoseconds": 1_750_000_000_000_000_000 - 1_700_000_000_000_000}
             ).write(d / "rank1.json")  # monotonic ts + base, 2025 too
    gpu_rank(2, world_size=3, base_us=1_500_000_000_000_000).write(d / "rank2.json")  # 2017
    run = cli(tmp_path, d)
    left_out(run, "rank2.json", "trace of another job (rank 2, unknown device, started 2017-07-14")
    assert sorted(run.ranks()) == [0, 1]


def test_ranks_missing_from_the_world(tmp_path, baseline):
    """Ranks 0 and 1 of 3: both analysed (exit 0), rank 2 listed as missing with a warning, not invented."""
    run = cli(tmp_path, good_folder(tmp_path))
    assert run.code == 0 and run.lines == []
    assert run.summary["world_size"] == WORLD and run.summary["ranks_missing"] == [2]
    (w,) = run.issues()
    assert w["severity"] == "warning" and "1 of 3 ranks have no trace (2)" in w["message"]
    assert_good_unchanged(run, baseline)


# ------------------------------------------------------------------------------------------ odd event values


def test_negative_durations(tmp_path, baseline):
    b = rank2()
    for e in b.events:
        if e.get("cat") == "kernel" and "gemm" in e["name"]:
            e["dur"] = -50
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    r = run.ranks()[2]
    assert any("2 events have a negative dur; counted as zero-length" in w for w in r["warnings"])
    assert r["compute_ms"] == 0.0 and r["overlap_ratio"] == 0.0  # nothing invented
    assert_good_unchanged(run, baseline)


def test_overlapping_kernels_on_one_stream_count_once(tmp_path, baseline):
    """Kernels on one stream cannot overlap; if a trace says they do, their time is still a union."""
    b = rank2(steps=1)
    b.kernel("void dup_gemm()", 150, 300, stream=7, launch_at=12)  # inside gemm [100, 700] on the same stream
    b.kernel("void tail_gemm()", 650, 100, stream=7, launch_at=13)  # [650, 750]: 50 µs past gemm's end
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    r = run.ranks()[2]
    assert r["compute_ms"] == pytest.approx(0.650, abs=1e-12)
    assert r["overlapped_comm_ms"] == pytest.approx(0.150, abs=1e-12)
    assert_good_unchanged(run, baseline)


def test_float_ns_timestamps_are_exact(tmp_path, baseline):
    """µs floats with ns fractions on an epoch clock: every ns survives."""
    b = TraceBuilder(rank=2, world_size=WORLD, base_us=1_700_000_000_000 + 0.25)
    b.step(1, 0, 1000.5)
    b.kernel("void gemm()", 100.001, 600.002, launch_at=10.123)  # [100.001, 700.003]
    b.nccl("allreduce", 600.5, 299.999, launch_at=11.7)  # [600.5, 900.499]
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    (s,) = run.ranks()[2]["steps"]
    ns = 1e-6  # one ns in ms
    assert s["time_ms"] == pytest.approx(800.498e-3, abs=ns / 10)
    assert s["compute_ms"] == pytest.approx(600.002e-3, abs=ns / 10)
    assert s["comm_ms"] == pytest.approx(299.999e-3, abs=ns / 10)
    assert s["overlapped_comm_ms"] == pytest.approx(99.503e-3, abs=ns / 10)
    assert_good_unchanged(run, baseline)


def test_events_without_dur(tmp_path, baseline):
    b = rank2()
    b.cpu_op("aten::no_dur", 50, 1)
    del b.events[-1]["dur"]
    b.kernel("void no_dur_kernel()", 950, 1, launch_at=12)
    del b.events[-1]["dur"]
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    r = run.ranks()[2]
    assert any("2 complete events have no dur; counted as zero-length" in w for w in r["warnings"])
    assert r["compute_ms"] == pytest.approx(0.6)  # zero-length: nothing added
    assert_good_unchanged(run, baseline)


@pytest.mark.parametrize("ts", [10**13, 1e300, -1e300], ids=["years-ahead", "1e300", "-1e300"])
def test_far_away_timestamps(tmp_path, baseline, ts):
    """'Record Window End' decades away, or a complete event at an absurd time: no overflow, no huge window."""
    b = rank2()
    b.instant("Record Window End", ts)
    b.raw({"ph": "X", "cat": "cpu_op", "name": "aten::from_far_away", "pid": b.pid, "tid": 100, "ts": ts,
           "dur": 1, "args": {}})
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    r = run.ranks()[2]
    assert r["step_time_ms"] == pytest.approx(0.8), r["warnings"]
    assert r["overlap_ratio"] == pytest.approx(1 / 3)
    assert_good_unchanged(run, baseline)


def test_no_profiler_step(tmp_path, baseline):
    b = rank2()
    b.events = [e for e in b.events if not str(e.get("name", "")).startswith("ProfilerStep")]
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    r = run.ranks()[2]
    assert any("no ProfilerStep in the trace" in w for w in r["warnings"])
    assert [s["step"] for s in r["steps"]] == [-1]
    assert r["step_time_ms"] == pytest.approx(1.8)  # first kernel start to last kernel end of the trace
    assert_good_unchanged(run, baseline)


def test_trace_with_only_cpu_ops(tmp_path, baseline):
    """A rank whose trace holds host ops only (profiler started without CUDA activities) in a GPU job."""
    b = TraceBuilder(rank=2, world_size=WORLD)
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 100, 300)
    b.cpu_op("aten::add", 200, 50)  # nested
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code == 0
    assert run.summary["trace_kind"] == "mixed"
    r = run.ranks()[2]
    assert r["trace_kind"] == "cpu" and r["overlap_ratio"] is None
    assert r["compute_ms"] == pytest.approx(0.3)
    assert_good_unchanged(run, baseline)


def test_hostile_event_values_never_crash(tmp_path, baseline):
    """Wrong types everywhere a number or string is expected."""
    b = rank2()
    odd = [None, True, "12", [], {"a": 1}, 2**70, -(2**70), 1e308, "\x00"]
    for i, v in enumerate(odd):
        b.raw({"ph": "X", "cat": v, "name": v, "pid": v, "tid": v, "ts": v, "dur": v, "args": v})
        b.raw({"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": b.base_us + 5, "dur": 1,
               "args": {"stream": v, "correlation": v, "Collective name": v, "In msg nelems": v, "dtype": v,
                        "Group size": v}})
        b.raw({"ph": "i", "name": "[memory]", "pid": v, "tid": v, "ts": b.base_us + 7,
               "args": {"Total Allocated": v, "Device Type": v, "Device Id": v, "Bytes": v}})
        b.raw(v)
    b.extra["deviceProperties"] = [None, {"id": "x", "totalGlobalMem": "big"}]
    b.extra["distributedInfo"] = {"rank": 2, "world_size": WORLD, "pg_config": "[{'pg_name': oops"}
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code in (0, 1), run.err
    if run.code == 1:
        left_out(run, "rank2.json", "")
    assert_good_unchanged(run, baseline)


def test_array_valued_ts_and_dur(tmp_path, baseline):
    """`dur: [600]` on every event (an array where a number belongs): no crash; the rank is used or left out."""
    b = rank2()
    for e in b.events:
        if e.get("ph") == "X":
            e["dur"] = [e["dur"]]
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", b))
    assert run.code in (0, 1), run.err
    if run.code == 1:
        left_out(run, "rank2.json", "")
    else:
        assert any("no dur" in w for w in run.ranks()[2]["warnings"])
    assert_good_unchanged(run, baseline)


# ------------------------------------------------------------------------------------------ hostile strings


HOSTILE = "evil\x00\x07\x1b[2J\x1b[31mred\u202edesrever\n\r\tname\x7f\u2028"


def test_control_characters_in_names(tmp_path, baseline):
    """Names keep their characters in the JSON summary; the terminal never sees a raw escape."""
    b = rank2(steps=1)
    b.kernel(f"void {HOSTILE}()", 150, 100, stream=8, launch_at=12)
    b.cpu_op(HOSTILE, 0, 1000)
    b.memory(200, 1 << 30, 1 << 30)
    d = with_bad(tmp_path, "rank2.json", b)
    run = cli(tmp_path, d, quiet=False)  # the terminal tables too
    assert run.code == 0
    assert "\x1b" not in run.out and "\u202e" not in run.out and "\x00" not in run.out
    r = run.ranks()[2]
    assert f"void {HOSTILE}()" in {k["name"] for k in r["top_kernels"]}
    assert r["memory"][0]["peak_op"] == HOSTILE
    assert_good_unchanged(run, baseline)


def test_invalid_utf8_in_names(tmp_path, baseline):
    """Kineto has written names cut inside a multi-byte character; one bad byte must not cost the whole rank.

    Expected: the rank is analysed, the bad bytes become U+FFFD, and a warning says so.
    """
    raw = rank2().to_bytes().replace(b"void gemm_kernel<float>()", b"void gemm_\xe4\xb8kernel\xff<float>()")
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", raw))
    assert_good_unchanged(run, baseline)
    assert run.code == 0, run.err
    r = run.ranks()[2]
    assert r["compute_ms"] == pytest.approx(0.6)
    assert any("\ufffd" in k["name"] for k in r["top_kernels"])
    assert any("UTF-8" in w for w in r["warnings"])


def test_unescaped_control_characters_in_json_strings(tmp_path, baseline):
    """Raw (unescaped) control bytes inside JSON strings are invalid JSON: the rank is left out cleanly or
    read leniently; never a crash, and the neighbours are untouched."""
    raw = rank2().to_bytes().replace(b"void gemm_kernel<float>()", b"void gemm\x01\x1b\nkernel()")
    run = cli(tmp_path, with_bad(tmp_path, "rank2.json", raw))
    assert run.code in (0, 1)
    if run.code == 1:
        left_out(run, "rank2.json", "invalid JSON")
    assert_good_unchanged(run, baseline)


@pytest.mark.parametrize("fname", ["rank2\n\x1b[31mred.json", "rank2\udcff\udcfe.json", "rank2 \u202e.json"],
                         ids=["newline-escape", "not-utf8", "bidi"])
def test_hostile_file_names(tmp_path, baseline, fname):
    """The file name goes into the one-line message escaped; the summary is still valid JSON."""
    d = good_folder(tmp_path)
    with open(os.path.join(os.fsencode(d), os.fsencode(fname)), "wb") as f:  # Linux file systems take any bytes
        f.write(b"{")
    run = cli(tmp_path, d)
    assert run.code == 1
    (line,) = run.lines
    assert "\n" not in line.strip() and "\x1b" not in line and "\u202e" not in line
    assert "rank2" in line and "truncated JSON" in line
    assert_good_unchanged(run, baseline)


# ------------------------------------------------------------------------------------------ the file system


def test_directory_with_no_traces(tmp_path):
    d = tmp_path / "nothing"
    (d / "logs").mkdir(parents=True)
    (d / "notes.txt").write_text("hello")
    (d / "logs" / "rank0.log").write_text("log")
    run = cli(tmp_path, d)
    assert run.code == 2 and run.summary is None
    (line,) = run.lines
    assert line.startswith(f"llmdiag: {d}: no trace files found")


def test_path_that_does_not_exist(tmp_path):
    run = cli(tmp_path, tmp_path / "nope")
    assert run.code == 2
    (line,) = run.lines
    assert "no such file or directory" in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="runs as root, where chmod 000 does not block reads (see the /proc/self/mem test)")
def test_unreadable_permissions(tmp_path, baseline):
    d = good_folder(tmp_path)
    p = d / "rank2.json"
    rank2().write(p)
    p.chmod(0)
    try:
        run = cli(tmp_path, d)
    finally:
        p.chmod(0o644)
    left_out(run, "rank2.json", "permission denied", "make the file readable")
    assert_good_unchanged(run, baseline)


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux /proc")
def test_unreadable_file_even_for_root(tmp_path, baseline):
    """A trace name pointing at /proc/self/mem: open() works, read() fails with EIO, even as root."""
    d = good_folder(tmp_path)
    os.symlink("/proc/self/mem", d / "rank2.json")
    run = cli(tmp_path, d)
    left_out(run, "rank2.json", "cannot read")
    assert_good_unchanged(run, baseline)


@pytest.mark.timeout(60)
def test_named_pipe_does_not_hang(tmp_path, baseline):
    d = good_folder(tmp_path)
    os.mkfifo(d / "rank2.json")
    run = cli(tmp_path, d)
    left_out(run, "rank2.json", "not a regular file (a named pipe)")
    assert_good_unchanged(run, baseline)
    run = cli(tmp_path, d / "rank2.json")
    assert run.code == 2 and "not a regular file" in run.lines[0]


def test_symlink_loop(tmp_path, baseline):
    d = good_folder(tmp_path)
    os.symlink(d / "rank2b.json", d / "rank2a.json")
    os.symlink(d / "rank2a.json", d / "rank2b.json")
    os.symlink(d, d / "again")  # a folder loop: symlinked folders are not followed
    run = cli(tmp_path, d)
    assert run.code == 1
    assert len(run.lines) == 2 and all("symbolic link" in x for x in run.lines)
    assert set(run.ranks()) == {0, 1}
    assert_good_unchanged(run, baseline)
    run = cli(tmp_path, d / "rank2a.json")
    assert run.code == 2 and "symbolic link" in run.lines[0]


def test_directory_named_like_a_trace(tmp_path, baseline):
    d = good_folder(tmp_path)
    (d / "rank2.json").mkdir()
    (d / "rank2.json" / "rank2.json").write_bytes(b"")  # a trace inside it, empty
    run = cli(tmp_path, d)
    left_out(run, "rank2.json", "empty file")
    assert_good_unchanged(run, baseline)


def test_nothing_usable_is_exit_2(tmp_path):
    d = tmp_path / "allbad"
    d.mkdir()
    (d / "rank0.json").write_bytes(b"")
    (d / "rank1.json").write_bytes(b"{")
    run = cli(tmp_path, d)
    assert run.code == 2 and run.summary is None
    (line,) = run.lines
    assert "no usable trace among 2 file(s)" in line and "empty file" in line


def test_bad_comm_regex_is_a_usage_error(tmp_path):
    run = cli(tmp_path, good_folder(tmp_path), extra=("--comm-regex", "(unclosed"))
    assert run.code == 2
    assert "--comm-regex is not a valid regular expression" in run.lines[0]


def test_analyze_path_raises_only_llmdiag_errors(tmp_path):
    d = tmp_path / "e"
    d.mkdir()
    (d / "rank0.json").write_bytes(b"\x1f\x8b\x08")
    with pytest.raises(LlmdiagError) as e:
        analyze_path(str(d), rules=False, jobs=1)
    assert "\n" not in e.value.line()


def test_a_bug_on_one_rank_does_not_take_down_the_others(tmp_path, baseline, monkeypatch):
    """The per-rank worker is a fault boundary: an unexpected exception leaves that file out, named."""
    import llmdiag.diagnose.metrics.rank.per_rank as rm

    real = rm.classify

    def broken(t, comm_regex=None):
        if t.path.endswith("rank2.json"):
            raise ZeroDivisionError("simulated bug\nwith a second line")
        return real(t, comm_regex)

    monkeypatch.setattr(rm, "classify", broken)
    d = with_bad(tmp_path, "rank2.json", rank2())
    out = tmp_path / "s.json"
    res = CliRunner().invoke(cli_main, ["analyze", str(d), "--no-report", "-q", "-j", "1", "--json", str(out)])
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    (line,) = res.stderr.splitlines()
    assert "rank2.json: internal error while analysing this trace (ZeroDivisionError: simulated bug\\nwith" in line
    run = Run(res, orjson.loads(out.read_bytes()))
    assert_good_unchanged(run, baseline)


def test_real_entry_point_in_a_subprocess(tmp_path):
    d = with_bad(tmp_path, "rank2.json", b"{")
    p = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", str(d), "--no-report", "-q", "-j", "2",
                        "--json", str(tmp_path / "s.json")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    (line,) = [x for x in p.stderr.splitlines() if x.strip()]
    assert LINE.match(line) and "rank2.json" in line and "truncated JSON" in line


@pytest.mark.parametrize("opt", ["--timeline", "--tables", "--json", "--report"])
def test_an_option_name_in_place_of_an_output_path_is_refused(tmp_path, monkeypatch, opt):
    """`--timeline -q` once wrote a file named `-q` (click takes the next word as the value): exit 2, one line,
    nothing written; `./-q` still names such a file on purpose."""
    gpu_rank(0, world_size=1).write(tmp_path / "t" / "rank0.json")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli_main, ["analyze", str(tmp_path / "t"), opt, "-q"])
    assert r.exit_code == 2 and "'-q' looks like an option, not a path" in r.output, r.output
    assert not (tmp_path / "-q").exists() and not (tmp_path / "llmdiag-report").exists()
