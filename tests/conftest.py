"""Shared fixture: run the real `llmdiag run` (CLI -> torchrun -> ranks) on CPU as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def llmdiag_run():
    """llmdiag_run(out, workload, *args, check=True) -> CompletedProcess; asserts exit 0 unless check=False."""

    def run(out, workload: str, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "llmdiag.diagnose.cli.main", "run", "--workload", workload, "--out", str(out),
               "--device", "cpu", *map(str, args)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if check:
            assert proc.returncode == 0, \
                f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    return run


# Real traces written by other teams stand beside CI's checkout (../shared/fixtures/real); a user's clone has
# none. Tests that read them carry `@pytest.mark.real` (optionally naming the files they need under that folder,
# absolute or relative to it: `@pytest.mark.real("hta/nccl_data.json.gz")`) and skip, with one reason, when the
# folder or a named file is absent; with LLMDIAG_REQUIRE_REAL=1 (set by .ci/run) they run and fail instead, so CI
# cannot silently skip them. No test words its own skip: one wording, from `real_skip_reason`.
REAL = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "real")


def real_skip_reason(*paths: str | os.PathLike) -> str | None:
    """The skip reason for a test that reads the real traces (`paths`: the files it needs), or None where it
    must run: everything is present, or LLMDIAG_REQUIRE_REAL=1 (absence is then the test's failure)."""
    if os.environ.get("LLMDIAG_REQUIRE_REAL") == "1":
        return None
    where = os.path.normpath(REAL)
    if not os.path.isdir(REAL):
        return f"needs the real traces in {where} (absent in this clone)"
    for p in paths:
        full = os.path.join(REAL, os.fspath(p))
        if not os.path.exists(full):
            return f"needs the real traces in {where} ({os.path.relpath(full, REAL)} absent in this clone)"
    return None


# `make test-fast` is the tier a developer runs in two minutes: no torchrun workload (every test that asks for
# the `llmdiag_run` fixture, directly or through a module fixture, is `slow`), no exhaustive property or scale
# sweep, no browser. CI runs everything.
EXHAUSTIVE = {"test_properties.py", "test_scale_outputs.py", "test_scale_stats.py", "test_engine_dask.py",
              "test_pack_fast.py"}
EXHAUSTIVE_DIRS = {"expert", "adversarial"}  # the expert corpus (every real set analysed) and the attack suite


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "llmdiag_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if item.path.name in EXHAUSTIVE or item.path.parent.name in EXHAUSTIVE_DIRS:
            item.add_marker(pytest.mark.exhaustive)
    for item in items:
        marks = list(item.iter_markers(name="real"))
        if marks:
            reason = real_skip_reason(*(p for m in marks for p in m.args))
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _terminal_columns(monkeypatch):
    """Terminal tables follow `COLUMNS` (else the tty, else 100: diagnose/gate/format.py). Tests that parse
    them split cells on runs of spaces, so they read them as a wide CI log would, at 160 columns; a test
    about the width sets its own."""
    monkeypatch.setenv("COLUMNS", "160")
