"""Hostile inputs outside the trace parser (issue 17 cases 2, 3, 8, 9, 10, 13): each run as the real command
line in a subprocess, asserting the exit code, one `llmdiag:` line, no traceback, no temp file left, and
(where a trace is involved) the good ranks' numbers unchanged. Memory cases run under an address-space cap
(RLIMIT_AS), so a regression fails with MemoryError instead of taking the machine's memory.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from llmdiag.diagnose.model.files import gunzip_bounded, read_bounded, write_atomic
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.codec import to_json_dict
from tests.gen.builder import gpu_rank

REPO = Path(__file__).resolve().parents[3]
CAP = 3 << 29  # 1.5 GiB of address space for memory cases: the CLI needs ~0.4 GB of it


def llmdiag(*args, cwd, cap: int | None = None, timeout: float = 60, fsize: int | None = None):
    pre = [f"resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))"] if cap else []
    if fsize:
        pre += ["signal.signal(signal.SIGXFSZ, signal.SIG_IGN)", f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize}))"]
    code = ("import resource, signal, sys; " + "; ".join(pre) + ("; " if pre else "")
            + "sys.argv = ['llmdiag'] + sys.argv[1:]; from llmdiag.diagnose.cli.main import main; main()")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_ACTIONS": ""}
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr[-2000:]
    return p


def one_line(p, *words):
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmdiag: "), p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def no_temp(*folders):
    for d in folders:
        left = [n for n in os.listdir(d) if ".tmp" in n or n.startswith(".report-")]
        assert not left, left


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    run = d / "run"
    for r in (0, 1):
        gpu_rank(r, world_size=2).write(run / f"rank{r}.json")
    p = llmdiag("analyze", run, "--no-report", "-q", "--json", d / "good.json", cwd=d)
    assert p.returncode == 0, p.stderr
    return d


def numbers(path) -> dict:
    s = orjson.loads(Path(path).read_bytes())
    return {r["rank"]: {k: v for k, v in r.items() if k not in ("file", "warnings")} for r in s["ranks"]}


# ---- case 2: one absurd number never loses every rank's output -----------------------------------------------

@pytest.mark.parametrize("value", [1e30, 1e300])
def test_absurd_message_size_is_an_invalid_value_warning(tmp_path, good, value):
    d = tmp_path / "run"
    gpu_rank(0, world_size=2).write(d / "rank0.json")
    b = gpu_rank(1, world_size=2)
    for e in b.events:
        if isinstance(e.get("args"), dict) and "In msg nelems" in e["args"]:
            e["args"]["In msg nelems"] = value
    b.write(d / "rank1.json")
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    r1 = next(r for r in s["ranks"] if r["rank"] == 1)
    assert any(w.startswith("invalid value: comm_by_kind[0].bytes") for w in r1["warnings"]), r1["warnings"]
    assert r1["comm_by_kind"][0]["busbw_gbps"] is None and r1["comm_by_kind"][0]["bytes"] == 0
    assert numbers(tmp_path / "s.json")[0] == numbers(good / "good.json")[0]  # the good rank unchanged
    no_temp(tmp_path)


def test_json_writer_never_raises_on_huge_numbers():
    from dataclasses import dataclass

    @dataclass
    class T:
        a: int
        b: float
        c: list

    d, mended = to_json_dict(T(10**30, 1e300, [2**64 + 1, 10**400, -(10**20)]))
    assert mended and d == {"a": 1e30, "b": 1e300, "c": [float(2**64 + 1), None, -1e20]}


# ---- case 3: bounded memory -------------------------------------------------------------------------------------

def test_world_size_1e10_is_bounded(tmp_path, good):
    d = tmp_path / "run"
    b = gpu_rank(0, world_size=1)
    b.world_size, b.pg_config = 10**10, []
    b.write(d / "rank0.json")
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path, cap=CAP)
    assert p.returncode == 0, p.stderr
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert s["ranks_missing"] == [] and len(s["ranks"]) == 1
    assert any("invalid value: world_size" in i["message"] for i in s["issues"])


def test_gzip_bomb_baseline_is_refused_within_the_cap(tmp_path, good):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b'{"schema_version": 2, "ranks": [], "x": "')
        for _ in range(300):  # 300 MiB of "a" (over the 256 MiB budget) in ~300 kB on disk
            f.write(b"a" * (1 << 20))
        f.write(b'"}')
    p = llmdiag("check", good / "good.json", "--baseline", bomb, cwd=tmp_path, cap=CAP)
    assert p.returncode == 2
    one_line(p, "bomb.json.gz", "budget")


def test_dev_zero_as_baseline_is_refused(tmp_path, good):
    p = llmdiag("check", good / "good.json", "--baseline", "/dev/zero", cwd=tmp_path, cap=CAP, timeout=20)
    assert p.returncode == 2
    one_line(p, "/dev/zero", "not a regular file")


def test_bounded_reader_units(tmp_path):
    big = tmp_path / "big.gz"
    big.write_bytes(gzip.compress(b"x" * 5000) + gzip.compress(b"y" * 10))  # two members: both read
    assert read_bounded(str(big), 6000) == b"x" * 5000 + b"y" * 10
    with pytest.raises(LlmdiagError, match="more than its 4000 bytes budget"):
        read_bounded(str(big), 4000)
    with pytest.raises(LlmdiagError, match="budget"):
        gunzip_bounded(gzip.compress(b"z" * 10_000), 100, "p", "summary")


# ---- case 8: no temp-file symlink race ---------------------------------------------------------------------

def test_predictable_temp_name_symlink_is_not_followed(tmp_path, good):
    """The old writer opened <path>.tmp<pid> without O_EXCL/O_NOFOLLOW: plant that link for this process's
    pid and run analyze in-process, so the old code would write through it into the victim."""
    from click.testing import CliRunner

    from llmdiag.diagnose.cli.main import main

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    target = out / "summary.json"
    os.symlink(victim, f"{target}.tmp{os.getpid()}")
    r = CliRunner().invoke(main, ["analyze", str(good / "run"), "--no-report", "-q", "--json", str(target)])
    assert r.exit_code == 0, r.output
    assert victim.read_text() == "precious" and not target.is_symlink()
    assert numbers(target) == numbers(good / "good.json")


def test_write_atomic_cleans_up_on_error(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    write_atomic(str(d / "a.json"), b"1")
    with pytest.raises(LlmdiagError, match="is a directory"):
        write_atomic(str(d), b"2")
    assert sorted(os.listdir(d)) == ["a.json"] and oct(os.stat(d / "a.json").st_mode & 0o777) == oct(0o644 & ~_umask())


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


# ---- case 9: FIFOs never hang ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["current", "baseline", "config", "diff"])
def test_fifo_is_refused_in_one_line(tmp_path, good, where):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    g = good / "good.json"
    args = {"current": ("check", fifo, "--baseline", g), "baseline": ("check", g, "--baseline", fifo),
            "config": ("check", g, "--config", fifo, "--min-overlap", "0"), "diff": ("diff", g, fifo)}[where]
    p = llmdiag(*args, cwd=tmp_path, timeout=20)
    assert p.returncode == 2
    one_line(p, "f.json", "named pipe")


# ---- case 10: output errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["directory", "too-long", "no-folder", "read-only", "disk-full"])
def test_output_error_is_one_line_exit_2_nothing_left(tmp_path, good, case):
    out = tmp_path / "out"
    out.mkdir()
    fsize = None
    target = {"directory": out, "too-long": out / ("x" * 300 + ".json"), "no-folder": Path("/proc/nope/s.json"),
              "read-only": out / "s.json", "disk-full": out / "s.json"}[case]
    if case == "read-only":
        if os.geteuid() == 0:
            target = Path("/proc/version")  # root writes anywhere; /proc refuses a new file even to root
        else:
            out.chmod(0o555)
    if case == "disk-full":
        fsize = 4096  # RLIMIT_FSIZE: the write fails with EFBIG, as it would with ENOSPC
    p = llmdiag("analyze", good / "run", "--no-report", "-q", "--json", target, cwd=tmp_path, fsize=fsize)
    out.chmod(0o755)
    assert p.returncode == 2, p.stderr
    one_line(p, "cannot write")
    no_temp(out)
    if case == "disk-full":
        assert not (out / "s.json").exists()


def test_report_write_error_is_one_line(tmp_path, good):
    p = llmdiag("analyze", good / "run", "-q", "--json", tmp_path / "s.json", "--report", "/proc/nope/r.html",
                cwd=tmp_path)
    assert p.returncode == 2
    one_line(p, "cannot write the report")


# ---- case 13: small items ----------------------------------------------------------------------------------

def test_infinite_limit_on_the_command_line(tmp_path, good):
    p = llmdiag("check", good / "good.json", "--baseline", good / "good.json", "--max-step-time-rise", "1e999",
                cwd=tmp_path)
    assert p.returncode == 2
    one_line(p, "finite")


def test_binary_toml_is_one_line(tmp_path, good):
    cfg = tmp_path / "g.toml"
    cfg.write_bytes(b"\xff\xfe\x00[overlap_ratio]")
    p = llmdiag("check", good / "good.json", "--config", cfg, cwd=tmp_path)
    assert p.returncode == 2
    one_line(p, "g.toml", "not UTF-8")


def test_schema_version_string_one(tmp_path, good):
    s = orjson.loads((good / "good.json").read_bytes())
    s["schema_version"] = "1"
    p = tmp_path / "s.json"
    p.write_bytes(orjson.dumps(s))
    r = llmdiag("check", p, "--min-overlap", "0", cwd=tmp_path)
    assert r.returncode == 2
    line = one_line(r, "schema_version")
    assert "newer" not in line


def test_escape_bytes_in_folder_names_never_reach_the_terminal(tmp_path, good):
    d = tmp_path / "evil\x1b]0;owned\x07\x1b[2J"
    for r in (0, 1):
        gpu_rank(r, world_size=2).write(d / f"rank{r}.json")
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", d / "s.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout and "summary: " in p.stdout


# ---- case 3: the whole-file fallback is bounded too ----------------------------------------------------------

def _gz_stream(path, parts, level=1):
    with gzip.open(path, "wb", compresslevel=level) as f:
        for p in parts:
            f.write(p)


def test_megabytes_of_leading_whitespace_stream_within_the_cap(tmp_path, good):
    d = tmp_path / "run"
    gpu_rank(0, world_size=2).write(d / "rank0.json")
    raw = gpu_rank(1, world_size=2).to_bytes()
    _gz_stream(d / "rank1.json.gz", [b" " * (1 << 20)] * 600 + [raw])  # 600 MB of blanks, then the trace
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path, cap=CAP)
    assert p.returncode == 0, p.stderr
    assert numbers(tmp_path / "s.json") == numbers(good / "good.json")


def test_unstreamable_bomb_is_refused_within_the_cap(tmp_path, good):
    d = tmp_path / "run"
    gpu_rank(0, world_size=2).write(d / "rank0.json")
    # no "traceEvents" in the first 64 MB: the whole-file path, which must stop at its budget
    _gz_stream(d / "rank1.json.gz", [b'{"padding": "'] + [b"a" * (1 << 20)] * 600 + [b'", "traceEvents": []}'])
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path, cap=CAP)
    assert p.returncode == 1, p.stderr
    one_line(p, "rank1.json.gz", "too large to parse whole")
    assert numbers(tmp_path / "s.json")[0] == numbers(good / "good.json")[0]


# ---- case 11: an unreadable sub-folder is one left-out input -------------------------------------------------

def test_unreadable_sub_folder_is_left_out(tmp_path, good, monkeypatch):
    from click.testing import CliRunner

    from llmdiag.diagnose.cli.main import main

    d = tmp_path / "run"
    for r in (0, 1):
        gpu_rank(r, world_size=2).write(d / f"rank{r}.json")
    locked = d / "locked"
    gpu_rank(1, world_size=2).write(locked / "rank1_other.json")
    real = os.scandir

    def scandir(path="."):  # what a chmod 000 folder does to a non-root user (the tests may run as root)
        if os.path.abspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-report", "-q", "--json", str(tmp_path / "s.json")])
    assert r.exit_code == 1, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert line.startswith(f"llmdiag: {locked}: ") and "unreadable folder: Permission denied" in line
    assert numbers(tmp_path / "s.json") == numbers(good / "good.json")
    monkeypatch.setattr(os, "scandir", lambda path=".": (_ for _ in ()).throw(PermissionError(13, "Permission denied", str(path))))
    r = CliRunner().invoke(main, ["analyze", str(d), "--no-report", "-q", "--json", str(tmp_path / "t.json")])
    assert r.exit_code == 2 and "cannot list directory" in r.stderr  # the input folder itself: an input error


def test_duplicate_trace_events_key_is_left_out_not_silently_replaced(tmp_path, good):
    d = tmp_path / "run"
    gpu_rank(0, world_size=2).write(d / "rank0.json")
    raw = gpu_rank(1, world_size=2).to_bytes()
    (d / "rank1.json").write_bytes(b'{"traceEvents": [], ' + raw[1:])  # which array is meant?
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    one_line(p, "rank1.json", "duplicate key")
    assert numbers(tmp_path / "s.json")[0] == numbers(good / "good.json")[0]


def test_huge_step_and_pipeline_label_numbers_never_crash(tmp_path, good):
    d = tmp_path / "run"
    gpu_rank(0, world_size=2).write(d / "rank0.json")
    b = gpu_rank(1, world_size=2)
    for e in b.events:
        if e.get("name") == "ProfilerStep#1":
            e["name"] = "ProfilerStep#1" + "0" * 30  # 1e30: beyond int64
    b.pp(1, "F", 10**30, 100, 400)
    b.pp(10**25, "B", 1, 450, 800)
    b.write(d / "rank1.json")
    p = llmdiag("analyze", d, "--no-report", "-q", "--json", tmp_path / "s.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert numbers(tmp_path / "s.json")[0] == numbers(good / "good.json")[0]
    no_temp(tmp_path)


def test_run_on_a_full_disk_is_one_line(tmp_path):
    out = tmp_path / "run"
    p = llmdiag("run", "--workload", "dp2", "--out", out, "--steps", "3", "--profile-steps", "0,1,1",
                cwd=tmp_path, fsize=100, timeout=120)
    assert p.returncode == 2
    one_line(p, "manifest.json", "cannot write")
    assert not (out / "manifest.json").exists() and not [n for n in os.listdir(out) if ".tmp" in n]


def test_fifo_as_the_job_summary_does_not_hang_the_gate(tmp_path, good):
    fifo = tmp_path / "step_summary"
    os.mkfifo(fifo)
    code = ("import sys; sys.argv = ['llmdiag', 'check', sys.argv[1], '--min-overlap', '0']; "
            "from llmdiag.diagnose.cli.main import main; main()")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(fifo)}
    p = subprocess.run([sys.executable, "-c", code, str(good / "good.json")], capture_output=True, text=True,
                       timeout=30, env=env, cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
