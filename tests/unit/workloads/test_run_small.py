"""`llmdiag run`'s small errors (issue 36): `epN` in `run --help`, `ep2` taking a default number of experts
instead of refusing, Ctrl-C exiting 130 (the shell's code for SIGINT) not 1, and `analyze` of a run stopped
before any trace saying so instead of "no trace files found". torchrun is replaced by a process that sleeps
(no rank starts), so this is fast and torch-free."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.io.discover import discover
from llmdiag.workloads import interrupts
from llmdiag.workloads import launch as L
from llmdiag.workloads.manifest import _options
from llmdiag.workloads.options import RunOptions, prepare


def test_run_help_names_every_dimension():
    out = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    for dim in ("dpN", "fsdpN", "tpN", "ppN", "cpN", "epN"):
        assert dim in out, dim


@pytest.mark.parametrize("workload, experts", [("ep2", 4), ("dp4ep4", 8), ("dp2", 0), ("tp2pp2", 0)])
def test_ep_takes_a_default_number_of_experts(workload, experts):
    run = prepare(RunOptions(workload))
    assert run.plan.model.moe_experts == experts
    assert _options(run)["moe_experts"] == experts  # the manifest records what ran, not the 0 given
    assert run.plan.model.moe_experts % run.plan.layout.ep == 0


def test_explicit_experts_are_kept_under_ep():
    assert prepare(RunOptions("ep2", moe_experts=6)).plan.model.moe_experts == 6


def test_ep_default_reaches_the_ranks_unchanged():
    """Each rank derives its plan from the argv the launcher sends (moe_experts 0): the same default."""
    from llmdiag.workloads.optspec import to_argv

    opts = RunOptions("ep2", out="/tmp/x")
    assert prepare(RunOptions.from_argv(to_argv(opts))).plan == prepare(opts).plan


@pytest.fixture
def sleeping_torchrun(monkeypatch):
    """torchrun replaced by a process that sleeps (same Popen arguments: own session, dies with us)."""
    real = L.subprocess.Popen
    started = threading.Event()

    def popen(cmd, **kw):
        p = real([sys.executable, "-c", "import time; time.sleep(60)"], **kw)
        started.set()
        return p

    monkeypatch.setattr(L.subprocess, "Popen", popen)
    return started


def _ctrl_c_once_trapped(started: threading.Event) -> threading.Thread:
    """SIGINT to this process once the launcher's handler is in place (never before: that would stop pytest)."""

    def send():
        started.wait(30)
        end = time.monotonic() + 30
        while signal.getsignal(signal.SIGINT) is not interrupts._raise_interrupted:
            if time.monotonic() > end:
                return  # never trapped: no signal (the run ends at its --timeout and the test fails on its code)
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def test_ctrl_c_exits_130_and_analyze_says_the_run_was_interrupted(tmp_path, sleeping_torchrun):
    out = tmp_path / "run"
    sender = _ctrl_c_once_trapped(sleeping_torchrun)
    r = CliRunner().invoke(main, ["run", "--workload", "dp2", "--device", "cpu", "--out", str(out),
                                  "--profile-steps", "0,1,1", "--steps", "3", "--timeout", "60"])
    sender.join(5)
    assert r.exit_code == 130, r.output
    assert "interrupted (SIGINT)" in r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and "interrupted (SIGINT)" in m["failure"]["reason"]
    assert signal.getsignal(signal.SIGINT) is not interrupts._raise_interrupted  # the handler is put back

    with pytest.raises(LlmdiagError) as e:
        discover(str(out))
    assert "the run stopped before any rank wrote its trace" in e.value.line()
    assert "llmdiag run was interrupted (SIGINT)" in e.value.line()
    a = CliRunner().invoke(main, ["analyze", str(out), "--no-report", "-q"])
    assert a.exit_code == 2 and "interrupted (SIGINT)" in a.output, a.output


def test_ctrl_c_before_torchrun_starts_exits_130(monkeypatch, tmp_path):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(L, "launch", interrupted)
    r = CliRunner().invoke(main, ["run", "--workload", "dp2", "--device", "cpu", "--out", str(tmp_path / "r")])
    assert r.exit_code == 130 and "interrupted" in r.output, r.output


def test_no_traces_reasons_from_the_manifest(tmp_path):
    """Only the manifest's own words change the line; a folder without one keeps the plain message, and the
    manifest's reason is escaped and cut (it is untrusted)."""
    with pytest.raises(LlmdiagError, match="no trace files found \\(expected"):
        discover(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"status": "running"}))
    with pytest.raises(LlmdiagError, match="still running"):
        discover(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"status": "failed",
                                                        "failure": {"reason": "x\x1b[31m" + "y" * 500}}))
    with pytest.raises(LlmdiagError) as e:
        discover(str(tmp_path))
    line = e.value.line()
    assert "\x1b" not in line and "\\x1b" in line and "y" * 201 not in line
