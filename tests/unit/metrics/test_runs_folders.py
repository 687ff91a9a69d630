"""A folder holding several runs of one job: grouped into runs by their time spans, the newest analysed and
named, `--run` picks another; what is not several runs (true duplicates in one run, runs overlapping in
time, files that do not say when they ran) keeps the duplicate handling of diagnose.metrics.ranks.

Each folder is generated: the test knows which file belongs to which run because it wrote it.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main as cli_main
from tests.gen.builder import gpu_rank

WALL_US = 1_698_958_767_000_000  # 2023-11-02 20:59:27 UTC: an epoch clock, as older Kineto writes
APART_US = 173_000_000  # a script run again three minutes later
HOST = "ip-10-0-0-1.ec2.internal"


def write_run(d: Path, start_us: int, pid0: int, world: int = 4, ranks=None, step_us: int = 1000, tag: str = "") -> list[Path]:
    """One run: ranks with pids pid0.., their traces starting at `start_us`, Kineto's file names (host_PID.NS)."""
    out = []
    for r in ranks if ranks is not None else range(world):
        b = gpu_rank(r, world_size=world, base_us=start_us + 37 * r, pid=pid0 + r, step_us=step_us)
        if tag:
            b.kernel(f"void {tag}_kernel()", 650, 100 + r, stream=8, launch_at=12)
        ns = (start_us + 5_000_000 + 1000 * r) * 1000  # written a few seconds after the capture
        out.append(Path(b.write(d / f"{HOST}_{pid0 + r}.{ns}.pt.trace.json")))
    return out


def analyze(tmp_path, d, *extra):
    out = tmp_path / "out" / "s.json"
    res = CliRunner().invoke(cli_main, ["analyze", str(d), "--no-report", "--json", str(out), "-q", "-j", "1", *extra])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    return res, out


def summary(path: Path) -> dict:
    return orjson.loads(path.read_bytes())


def files_of(s: dict) -> set[str]:
    return {Path(r["file"]).name for r in s["ranks"]}


def test_two_runs_newest_analysed_and_named(tmp_path):
    d = tmp_path / "two"
    old = write_run(d, WALL_US, 54105)
    new = write_run(d, WALL_US + APART_US, 55988, tag="second")
    res, out = analyze(tmp_path, d)
    assert res.exit_code == 0, res.stderr
    s = summary(out)
    assert files_of(s) == {p.name for p in new} and sorted(r["rank"] for r in s["ranks"]) == [0, 1, 2, 3]
    assert s["name"].endswith("-run2") and s["ranks_duplicate"] == [] and s["ranks_missing"] == []
    assert [(r["number"], r["files"], r["ranks"], r["analysed"]) for r in s["runs"]] == [
        (1, 4, [0, 1, 2, 3], False), (2, 4, [0, 1, 2, 3], True)]
    assert s["runs"][0]["pids"] == [54105, 54106, 54107, 54108]
    assert s["runs"][1]["start"] == "2023-11-02 21:02:20 UTC"
    (line,) = [x for x in res.stderr.splitlines() if "holds 2 runs" in x]
    assert line.startswith("llmdiag: ") and "Analysed run 2 (the newest)" in line and "--run 1" in line
    assert any("holds 2 runs" in i["message"] and i["severity"] == "warning" for i in s["issues"])
    assert not any(i["severity"] == "error" for i in s["issues"])
    res, out = analyze(tmp_path, d, "--run", "1")
    assert res.exit_code == 0 and files_of(summary(out)) == {p.name for p in old}


def test_run_all_writes_each_run_beside_the_other(tmp_path):
    d = tmp_path / "two"
    old = write_run(d, WALL_US, 100)
    new = write_run(d, WALL_US + APART_US, 200)
    res, out = analyze(tmp_path, d, "--run", "all")
    assert res.exit_code == 0, res.stderr
    one, two = out.with_name("s-run1.json"), out.with_name("s-run2.json")
    assert files_of(summary(one)) == {p.name for p in old} and files_of(summary(two)) == {p.name for p in new}
    assert not out.exists()


def test_three_runs_pick_the_middle_one(tmp_path):
    d = tmp_path / "three"
    runs = [write_run(d, WALL_US + k * APART_US, 1000 * (k + 1)) for k in range(3)]
    res, out = analyze(tmp_path, d)
    assert res.exit_code == 0 and files_of(summary(out)) == {p.name for p in runs[2]}
    res, out = analyze(tmp_path, d, "--run", "2")
    assert res.exit_code == 0 and files_of(summary(out)) == {p.name for p in runs[1]}
    assert "holds 3 runs" in res.stderr and "Analysed run 2;" in res.stderr


@pytest.mark.parametrize("value,text", [("4", "--run 4: the input holds 3 runs (1-3, oldest first)"),
                                        ("latest", "--run 'latest' is not newest, all or a run number"),
                                        ("0", "--run '0' is not newest")])
def test_a_bad_run_is_one_line_and_exit_2(tmp_path, value, text):
    d = tmp_path / "three"
    for k in range(3):
        write_run(d, WALL_US + k * APART_US, 1000 * (k + 1))
    res, out = analyze(tmp_path, d, "--run", value)
    assert res.exit_code == 2 and not out.exists()
    (line,) = [x for x in res.stderr.splitlines() if x.strip()]
    assert line.startswith("llmdiag: ") and text in line


def test_one_run_has_no_run_2(tmp_path):
    d = tmp_path / "one"
    write_run(d, WALL_US, 10)
    res, out = analyze(tmp_path, d, "--run", "2")
    assert res.exit_code == 2 and "the input holds one run" in res.stderr
    res, out = analyze(tmp_path, d, "--run", "1")
    assert res.exit_code == 0 and "the input holds" not in res.stderr and summary(out)["runs"] == []


def test_runs_overlapping_in_time_are_not_split(tmp_path):
    """Two sets of ranks 0-3 whose captures overlap in time (two jobs at once, or one job's stray files):
    not runs of one GPU set one after the other, so nothing is split and each rank claimed twice with
    different numbers is left out, as before (nothing usable: exit 2)."""
    d = tmp_path / "overlap"
    write_run(d, WALL_US, 100)
    write_run(d, WALL_US + 1500, 200, tag="other")  # starts while the first set is still in its first step
    res, out = analyze(tmp_path, d)
    assert res.exit_code == 2 and "appears in 2 files; all of them left out" in res.stderr
    assert "the input holds" not in res.stderr


def test_a_run_with_one_copied_rank_keeps_the_old_handling(tmp_path):
    """A copy of rank 2 in the same run (same clock): one run with an identical duplicate, kept once."""
    d = tmp_path / "dup"
    files = write_run(d, WALL_US, 300)
    (d / "backup").mkdir()
    (d / "backup" / files[2].name).write_bytes(files[2].read_bytes())
    res, out = analyze(tmp_path, d)
    s = summary(out)
    assert res.exit_code == 0 and s["ranks_duplicate"] == [2] and s["runs"] == []
    assert sorted(r["rank"] for r in s["ranks"]) == [0, 1, 2, 3] and not s["name"].endswith("-run1")


def test_a_newer_incomplete_run_does_not_hide_the_complete_one(tmp_path):
    """The newest run crashed before rank 3 wrote its trace: the newest complete run is analysed by default,
    `--run 2` analyses the partial one (rank 3 named missing)."""
    d = tmp_path / "partial"
    old = write_run(d, WALL_US, 100)
    new = write_run(d, WALL_US + APART_US, 200, ranks=[0, 1, 2])
    res, out = analyze(tmp_path, d)
    s = summary(out)
    assert res.exit_code == 0 and files_of(s) == {p.name for p in old} and s["ranks_missing"] == []
    assert [r["ranks"] for r in s["runs"]] == [[0, 1, 2, 3], [0, 1, 2]]
    assert "Analysed run 1 (the newest complete run)" in res.stderr
    res, out = analyze(tmp_path, d, "--run", "2")
    s = summary(out)
    assert res.exit_code == 0 and files_of(s) == {p.name for p in new} and s["ranks_missing"] == [3]


def test_file_name_times_split_runs_whose_traces_have_no_wall_clock(tmp_path):
    """A monotonic ts and no baseTimeNanoseconds: the traces do not say when they ran, Kineto's file names do
    (minutes apart). Without such names (rank<N>.json) nothing says it, and duplicates are handled as before."""
    d = tmp_path / "names"
    mono = 1_700_000_000_000  # not an epoch: a counter
    for k, pid in ((0, 100), (1, 200)):
        for r in range(2):
            b = gpu_rank(r, world_size=2, base_us=mono + 10 * k, pid=pid + r, step_us=1000 + 500 * k)
            ns = (WALL_US + k * APART_US + 1000 * r) * 1000
            b.write(d / f"{HOST}_{pid + r}.{ns}.pt.trace.json")
    res, out = analyze(tmp_path, d)
    s = summary(out)
    assert res.exit_code == 0, res.stderr
    assert {Path(r["file"]).name.split("_")[-1].split(".")[0] for r in s["ranks"]} == {"200", "201"}
    plain = tmp_path / "plain"
    for k in range(2):
        for r in range(2):
            gpu_rank(r, world_size=2, base_us=mono, step_us=1000 + 500 * k).write(plain / f"run{k}_rank{r}.json")
    res, out = analyze(tmp_path, plain)
    assert res.exit_code == 2 and "appears in 2 files" in res.stderr and "the input holds" not in res.stderr


def test_an_unreadable_file_goes_with_its_run(tmp_path):
    """A truncated trace named like run 1's files: analysing run 2 is complete (exit 0); run 1 names it (exit 1)."""
    d = tmp_path / "broken"
    old = write_run(d, WALL_US, 100, ranks=[0, 1, 2])
    write_run(d, WALL_US + APART_US, 200)
    bad = d / f"{HOST}_103.{(WALL_US + 5_003_000) * 1000}.pt.trace.json"
    bad.write_bytes(b'{"traceEvents": [')
    res, out = analyze(tmp_path, d)
    assert res.exit_code == 0, res.stderr
    res, out = analyze(tmp_path, d, "--run", "1")
    assert res.exit_code == 1 and bad.name in res.stderr and files_of(summary(out)) == {p.name for p in old}


REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real" / "torchrec" / "sst_long_a2a_optimizer_5_qcomm"


@pytest.mark.real(REAL)
def test_real_folder_with_two_runs(tmp_path):
    """TorchRec's qcomm folder: pids 54105-54108 captured at 20:59:27 UTC, 55988-55991 at 21:02:20 (distributedInfo
    ranks 0-3 of 4 in each; the events' ts spans 0.73 s and 0.76 s, 173 s apart)."""
    res, out = analyze(tmp_path, REAL)
    assert res.exit_code == 0, res.stderr
    s = summary(out)
    assert {n.split("_")[-1][:5] for n in files_of(s)} == {"55988", "55989", "55990", "55991"}
    assert [r["pids"] for r in s["runs"]] == [[54105, 54106, 54107, 54108], [55988, 55989, 55990, 55991]]
    res, out = analyze(tmp_path, REAL, "--run", "1")
    assert res.exit_code == 0
    assert {n.split("_")[-1][:5] for n in files_of(summary(out))} == {"54105", "54106", "54107", "54108"}


def test_the_report_says_which_run_it_describes(tmp_path):
    d = tmp_path / "two"
    write_run(d, WALL_US, 100)
    write_run(d, WALL_US + APART_US, 200)
    html = tmp_path / "r.html"
    res = CliRunner().invoke(cli_main, ["analyze", str(d), "--json", str(tmp_path / "s.json"), "--report", str(html),
                                        "-q", "-j", "1"])
    assert res.exit_code == 0, res.output
    text = html.read_text()
    head = text[text.index("<header>"):text.index("</header>")]
    assert "run 2 of 2" in head and "started 2023-11-02 21:02:20 UTC" in head
    assert "holds 2 runs" in text[text.index('id="issues"'):]
