"""Outputs as attacks: links planted where llmdiag writes. Every output goes through model/files.open_atomic
(a mkstemp file beside the target: O_CREAT|O_EXCL|O_NOFOLLOW and a random name, renamed over the target), so
a link at the target is refused, never written through nor replaced (issue 35; test_adv_output_targets.py
has the other kinds), and a link at a guessable temp name is never used;
the report's template cache is not kept in the shared temp folder (a planted `$TMPDIR/_jinja2-cache-<uid>`
link made jinja2 chmod its target 0700 and fail)."""

from __future__ import annotations

import gzip
import os
import stat

import pytest

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.files import open_atomic, write_atomic
from tests.adversarial.conftest import attack, check


def test_a_link_at_the_target_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "out.json").symlink_to(victim)
    with pytest.raises(LlmdiagError, match="a symbolic link is there"):
        write_atomic(str(tmp_path / "out.json"), "{}")
    assert victim.read_text() == "keep" and (tmp_path / "out.json").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["out.json", "victim"]  # no temp file left


def test_streaming_gzip_through_open_atomic(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "t.json.gz"
    target.write_text("old")
    with open_atomic(str(target)) as raw, gzip.GzipFile(fileobj=raw, mode="wb") as f:
        for i in range(1000):
            f.write(b'{"i": %d}\n' % i)
    assert victim.read_text() == "keep" and gzip.decompress(target.read_bytes()).count(b"\n") == 1000
    assert sorted(os.listdir(tmp_path)) == ["t.json.gz", "victim"]  # no temp file left


def test_an_error_in_the_block_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), open_atomic(str(tmp_path / "x.json")) as f:
        f.write(b"half")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_a_planted_jinja2_cache_link(tmp_path, run):
    """$TMPDIR/_jinja2-cache-<uid> planted as a link: a traceback and the link's target chmod'ed 0700 before."""
    tmp = tmp_path / "shared-tmp"
    tmp.mkdir()
    victim = tmp_path / "victim-dir"
    victim.mkdir()
    victim.chmod(0o755)
    (tmp / f"_jinja2-cache-{os.getuid()}").symlink_to(victim)
    r = attack("analyze", run, "-q", "--report", tmp_path / "r.html", "--json", tmp_path / "s.json",
               cwd=tmp_path, env={"TMPDIR": str(tmp)})
    check(r, 0, one_line=False)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755 and os.listdir(victim) == []
    assert (tmp_path / "r.html").stat().st_size > 0
    assert os.listdir(tmp) == [f"_jinja2-cache-{os.getuid()}"]  # nothing written to the shared temp folder


def _next_pids(n: int) -> range:
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    return range(last + 1, last + 1 + n)


@pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/ns_last_pid"),
                    reason="planting links at the next pids needs Linux's /proc/sys/kernel/ns_last_pid")
def test_timeline_temp_names_are_not_guessable(tmp_path, run):
    """Links planted at `<path>.tmp<pid>` for the next pids: the victim was overwritten and the output became
    the link."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "tl.json"
    for pid in _next_pids(400):
        os.symlink(victim, f"{out}.tmp{pid}")
    r = attack("analyze", run, "-q", "--no-report", "--json", tmp_path / "s.json", "--timeline", out, cwd=tmp_path)
    check(r, 0, one_line=False)
    assert victim.read_text() == "keep"
    assert not out.is_symlink() and out.stat().st_size > 0
