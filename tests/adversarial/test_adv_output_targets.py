"""Outputs that never destroy what is at the target (issue 35, high 1 and low "an output may overwrite an input").

Before: every writer (model/files.open_atomic and reports/render.render_report's own copy) renamed a temp file
over whatever was at the target: a FIFO, a socket, a link (`--timeline /dev/stdout`) or, run as root,
`/dev/null` itself became a regular file; `--json run/rank1.json` replaced the trace just analysed. Now the one
writer (open_atomic, render_report through it) replaces only a regular file that is no input of the command,
writes through a character device named directly (`--json /dev/null` skips the summary) and refuses the rest
in one line, before the analysis where the option names the path.
"""

from __future__ import annotations

import os
import socket
import stat

import pytest

from llmdiag.diagnose.errors import LlmdiagError
from tests.adversarial.conftest import attack, check


def _victim(tmp_path):
    v = tmp_path / "victim"
    v.write_text("keep")
    return v


@pytest.mark.parametrize("opt", ["--json", "--report", "--timeline"])
def test_a_link_at_an_output_is_refused(tmp_path, run, opt):
    victim = _victim(tmp_path)
    link = tmp_path / "out.x"
    link.symlink_to(victim)
    others = [o for o in (["--json", tmp_path / "s.json"], ["--report", tmp_path / "r.html"]) if o[0] != opt]
    r = attack("analyze", run, "-q", opt, link, *[x for o in others for x in o], cwd=tmp_path)
    check(r, 2, "out.x", "a symbolic link is there")
    assert link.is_symlink() and victim.read_text() == "keep"
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "r.html").exists()  # refused before any work


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_at_an_output_stays(tmp_path, run, kind):
    target = tmp_path / "out.json"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(target))
    r = attack("analyze", run, "-q", "--no-report", "--json", target, cwd=tmp_path)
    check(r, 2, "out.json", "not a regular file")
    mode = os.lstat(target).st_mode
    assert (stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISSOCK(mode))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_character_device_is_written_through_never_replaced(tmp_path, run):
    """A private copy of /dev/null (mknod 1,3): the real one is never put at risk by a regression."""
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    r = attack("analyze", run, "-q", "--json", null, "--report", null, "--timeline", null, cwd=tmp_path)
    check(r, 0, one_line=False)
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    assert sorted(os.listdir(tmp_path)) == ["null", "run"]  # no temp file, no report folder


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a block device needs root")
def test_a_block_device_is_refused(tmp_path, run):
    blk = tmp_path / "disk"
    os.mknod(blk, stat.S_IFBLK | 0o600, os.makedev(7, 200))  # a loop device number; never opened
    r = attack("analyze", run, "-q", "--no-report", "--json", blk, cwd=tmp_path)
    check(r, 2, "disk", "not a regular file (a device)")
    assert stat.S_ISBLK(os.lstat(blk).st_mode)


@pytest.mark.parametrize("opt", ["--json", "--report", "--timeline"])
def test_an_output_naming_an_input_trace_is_refused(tmp_path, run, opt):
    before = (run / "rank1.json").read_bytes()
    r = attack("analyze", run, "-q", opt, run / "rank1.json", cwd=tmp_path)
    check(r, 2, "rank1.json", "it is an input of this command")
    assert (run / "rank1.json").read_bytes() == before
    assert not (tmp_path / "llmdiag-report").exists()  # nothing else written either


def test_a_hard_link_to_an_input_is_an_input(tmp_path, run):
    os.link(run / "rank0.json", tmp_path / "alias.json")
    r = attack("analyze", run, "-q", "--no-report", "--json", tmp_path / "alias.json", cwd=tmp_path)
    check(r, 2, "alias.json", "it is an input")


def test_diff_and_check_outputs_never_replace_their_inputs(tmp_path, run):
    s = tmp_path / "s.json"
    check(attack("analyze", run, "-q", "--no-report", "--json", s, cwd=tmp_path), 0, one_line=False)
    before = s.read_bytes()
    check(attack("diff", s, s, "--json", s, cwd=tmp_path), 2, "s.json", "it is an input")
    check(attack("check", s, "--baseline", s, "--junit", s, cwd=tmp_path), 2, "s.json", "it is an input")
    assert s.read_bytes() == before
    fifo = tmp_path / "junit.xml"
    os.mkfifo(fifo)
    check(attack("check", s, "--baseline", s, "--junit", fifo, cwd=tmp_path), 2, "junit.xml", "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_render_report_goes_through_the_one_writer(tmp_path, run):
    """The Python API: render_report had its own temp+rename and no checks (a link became a regular file)."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.reports.render import render_report

    a = analyze_path(str(run), jobs=1)
    victim = _victim(tmp_path)
    (tmp_path / "r.html").symlink_to(victim)
    with pytest.raises(LlmdiagError, match="a symbolic link is there"):
        render_report(a, str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").is_symlink() and victim.read_text() == "keep"
    os.mkfifo(tmp_path / "f.html")
    with pytest.raises(LlmdiagError, match="not a regular file"):
        render_report(a, str(tmp_path / "f.html"))
    with pytest.raises(LlmdiagError, match="it is an input"):
        render_report(a, str(run / "rank0.json"))
    assert render_report(a, str(tmp_path / "ok.html")) and (tmp_path / "ok.html").stat().st_size > 1000
    assert sorted(os.listdir(tmp_path)) == ["f.html", "ok.html", "r.html", "run", "victim"]
