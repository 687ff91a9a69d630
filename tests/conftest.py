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
        cmd = [sys.executable, "-m", "diagnose.cli.main", "run", "--workload", workload, "--out", str(out),
               "--device", "cpu", *map(str, args)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if check:
            assert proc.returncode == 0, \
                f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    return run
