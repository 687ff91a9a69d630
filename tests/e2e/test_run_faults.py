"""A rank that raises, is killed, or hangs: `llmdiag run` exits 1, names it, keeps what finished, never hangs.

The hidden `--inject-fault rank:1:<kind>` fires at the first unprofiled step (step 2 of 3 here), after every
rank has written its trace, so the traces must survive the failure.
"""

from __future__ import annotations

import json
import os
import time

import pytest

pytestmark = pytest.mark.slow
STEPS = ["--profile-steps", "0,1,1", "--steps", "3"]


def _manifest(out) -> dict:
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def _no_process_left(out) -> bool:
    """No process still has the run folder on its command line (ranks or torchrun)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(out).encode() in f.read():
                    return False
        except OSError:
            continue
    return True


@pytest.mark.parametrize("kind,why", [("raise", "RuntimeError: llmdiag injected fault"),
                                      ("kill", "killed by signal 9 (SIGKILL)")])
def test_failing_rank_is_named_and_the_rest_is_kept(tmp_path, llmdiag_run, kind, why):
    out = tmp_path / kind
    proc = llmdiag_run(out, "dp2", *STEPS, "--inject-fault", f"rank:1:{kind}", check=False, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert f"FAILED: rank 1: {why}" in proc.stderr
    assert "logs/rank1.log" in proc.stderr and "injected fault" in proc.stderr  # the tail of the rank's log
    m = _manifest(out)
    assert m["status"] == "failed" and m["failure"]["rank"] == 1
    st = m["rank_status"]
    assert st["1"]["status"] == "failed" and why in st["1"]["error"]
    assert st["1"]["exit_code"] == (1 if kind == "raise" else -9)
    assert st["0"]["status"] == "failed"  # stopped because its peer died
    for r in ("0", "1"):  # both finished profiling before the fault: their traces stay
        assert st[r]["trace"] == f"traces/rank{r}.pt.trace.json.gz"
        assert os.path.getsize(os.path.join(out, st[r]["trace"])) > 0
    assert _no_process_left(out)


def test_a_hang_ends_at_the_timeout_with_stacks(tmp_path, llmdiag_run):
    out = tmp_path / "hang"
    timeout = 45
    t0 = time.monotonic()
    proc = llmdiag_run(out, "dp2", *STEPS, "--inject-fault", "rank:1:hang", "--timeout", str(timeout),
                       check=False, timeout=timeout + 120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert elapsed < timeout + 45, elapsed  # stack dump + SIGTERM + SIGKILL take seconds, not minutes
    assert f"timeout after {timeout} s" in proc.stderr
    m = _manifest(out)
    assert m["status"] == "failed" and m["failure"]["rank"] is None and m["failure"]["ranks"] == [0, 1]
    assert {s["status"] for s in m["rank_status"].values()} == {"timeout"}
    with open(os.path.join(out, "logs", "rank1.log")) as f:
        log = f.read()
    assert "injected fault: hang" in log and "faults.py" in log  # faulthandler's dump shows where it hangs
    assert _no_process_left(out)
