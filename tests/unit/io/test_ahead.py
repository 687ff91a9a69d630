"""A small input's traces parsed ahead in a forked child (io/ahead.py, cli/ahead.py): each trace claimed once, equal
to a parse here, only while its file is unchanged; a file that does not parse named by its own job as before; the
command's outputs those of a run without it, with no trace parsed in the command's own process; a child no longer
wanted reaped; and no child where the engine would not fork (Dask, --jobs 1, a pool's worth of files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmdiag.diagnose.cli import ahead as cli_ahead
from llmdiag.diagnose.engine import EngineSpec
from llmdiag.diagnose.io.loader import SPLIT_MIN_BYTES, load_trace
from tests.gen.builder import write_gpu_ranks

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(sys.platform != "linux" or not hasattr(os, "fork"), reason="forks on Linux only")


def _fresh(body: str) -> list:
    """`body` in a fresh interpreter (no thread left by another test: that rightly turns the fork off) on a
    machine taken as quiet; it sets `out`."""
    code = textwrap.dedent("""
        import json, os, sys
        from llmdiag.diagnose.io import forked
        forked.idle_core = lambda: True
        """) + textwrap.dedent(body) + "\nprint('OUT', json.dumps(out))\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.split("OUT ", 1)[1])


def test_each_trace_is_claimed_once_and_equals_a_parse_here(tmp_path):
    paths = write_gpu_ranks(tmp_path, 2)
    out = _fresh(f"""
        from llmdiag.diagnose.cli.ahead import _parse
        from llmdiag.diagnose.io import ahead, cache
        from llmdiag.diagnose.io.loader import _parse_once
        from tests.unit.engine.test_fork import same
        early = ahead.start({paths!r}, _parse)
        got = early.take()
        claimed = [ahead.claim(p, cache.identity(p)) for p in {paths!r}]
        out = [got, [same(t, _parse_once(p, 0)) for t, p in zip(claimed, {paths!r})],
               [ahead.claim(p, cache.identity(p)) is None for p in {paths!r}]]
        """)
    assert out == [2, [True, True], [True, True]]


def test_a_file_changed_since_is_parsed_again_and_a_bad_one_named_by_its_job(tmp_path):
    good, other = write_gpu_ranks(tmp_path, 2)
    bad = tmp_path / "rank9.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1')  # cut off
    out = _fresh(f"""
        from llmdiag.diagnose.cli.ahead import _parse
        from llmdiag.diagnose.errors import TraceError
        from llmdiag.diagnose.io import ahead
        from llmdiag.diagnose.io.loader import load_trace
        from tests.gen.builder import gpu_rank
        early = ahead.start([{good!r}, {other!r}, {str(bad)!r}], _parse)
        got = early.take()
        gpu_rank(0, world_size=2, steps=5).write({good!r})  # replaced after the parse ahead
        steps = len(load_trace({good!r}).ts)
        try:
            load_trace({str(bad)!r})
            line = None
        except TraceError as e:
            line = e.line()
        ahead.release()
        out = [got, steps, line, ahead._PARSED == {{}}]
        """)
    fresh = len(load_trace(good).ts)
    assert out[0] == 2 and out[1] == fresh and out[3] is True
    assert out[2] and out[2].startswith(f"llmdiag: {bad}:")


def test_the_command_parses_nothing_itself_and_writes_what_it_writes_without(tmp_path):
    """`analyze` of two small ranks: every parse ran in another process (the child ahead), and the summary is the
    one `--jobs 1` (no child at all) writes."""
    folder = tmp_path / "traces"
    folder.mkdir()
    write_gpu_ranks(folder, 2)
    log = tmp_path / "parses"
    out = _fresh(f"""
        from llmdiag.diagnose.io import loader
        real = loader._parse_once
        def counted(path, helpers):
            with open({str(log)!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            return real(path, helpers)
        loader._parse_once = counted
        from llmdiag.diagnose.cli.main import main
        for args in (["--json", {str(tmp_path / 'a.json')!r}], ["--json", {str(tmp_path / 'b.json')!r}, "-j", "1"]):
            try:
                main(["analyze", {str(folder)!r}, "-q", "--no-report", *args])
            except SystemExit as e:
                assert e.code == 0, e.code
            with open({str(log)!r}, "a") as f:
                f.write("--\\n")
        out = [os.getpid()]
        """)
    first, second = Path(log).read_text().split("--\n")[:2]
    here = str(out[0])
    assert len(first.split()) == 2 and here not in first.split()  # the default: each parsed once, ahead, in the child
    assert second.split() == [here, here]  # --jobs 1: no child, both parsed here

    def summary(name):
        d = json.loads((tmp_path / name).read_text())
        d.pop("provenance")
        return d

    assert summary("a.json") == summary("b.json")


def test_a_child_no_longer_wanted_is_reaped(tmp_path):
    """The command stops (Ctrl-C) while the traces parse ahead: the child is killed and reaped, none is left."""
    folder = tmp_path / "traces"
    folder.mkdir()
    write_gpu_ranks(folder, 2)
    out = _fresh(f"""
        from llmdiag.diagnose.cli.analyze import _parse_ahead
        from llmdiag.diagnose.engine import EngineSpec
        def interrupted():
            raise KeyboardInterrupt
        try:
            _parse_ahead({str(folder)!r}, EngineSpec(jobs=2, meanwhile=interrupted))
            stopped = False
        except KeyboardInterrupt:
            stopped = True
        try:
            os.waitpid(-1, os.WNOHANG)
            left = True
        except ChildProcessError:
            left = False
        out = [stopped, left]
        """)
    assert out == [True, False]


def test_no_child_where_the_engine_would_not_fork(tmp_path, monkeypatch):
    paths = write_gpu_ranks(tmp_path, 2)
    started = []
    monkeypatch.setattr(cli_ahead.ahead, "start", lambda files, parse: started.append(files) or "child")
    warm = EngineSpec(jobs=2, meanwhile=lambda: None)
    assert cli_ahead.parse_ahead(paths, warm) == "child"
    for spec in (EngineSpec(jobs=2), EngineSpec(jobs=1, meanwhile=lambda: None),
                 EngineSpec(dask_local=2, meanwhile=lambda: None)):
        assert cli_ahead.parse_ahead(paths, spec) is None
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: its size on disk is what counts
        f.truncate(cli_ahead.AHEAD_MAX_BYTES + 1)
    assert cli_ahead.parse_ahead([str(big)], warm) is None
    many = []
    for k in range(4):  # a pool's worth: 4 files of 1 MB each on 2 workers
        p = tmp_path / f"m{k}.json"
        with open(p, "wb") as f:
            f.truncate(1 << 20)
        many.append(str(p))
    assert cli_ahead.parse_ahead(many, warm) is None
    assert started == [paths]
    # a lone rank over the split parse's size is parsed on every core by its job, never ahead
    assert cli_ahead.AHEAD_MAX_BYTES < SPLIT_MIN_BYTES
