"""`make demo` installs what the demo needs (llmdiag[workloads]: torch), `make test` and `make lint` the dev
toolchain too, each from nothing, and one after the other in the same venv (issue 36: the demo installed the
whole toolchain, 1.9 GB and JupyterLab through HTA). Read with `make -n` (prints, runs nothing) against a venv
path of this test's own, its stamps planted by hand."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = "install -e '.[workloads]'"
DEV = "install -e '.[dev,workloads]'"
TORCH = "torch==2.13.0"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _plan(venv, target: str) -> str:
    p = subprocess.run(["make", "-n", "-C", ROOT, target, f"VENV={venv}", "PYTHON=python3"], capture_output=True,
                       text=True, timeout=60)  # -n prints the torch step's whole `if`, CUDA or not
    assert p.returncode == 0, p.stderr
    return p.stdout


def _stamp(venv, *names: str) -> None:
    os.makedirs(venv, exist_ok=True)
    for n in names:
        with open(os.path.join(venv, n), "w"):
            pass


def test_demo_from_nothing_installs_no_test_toolchain(tmp_path):
    plan = _plan(tmp_path / "v", "demo")
    assert "-m venv" in plan and TORCH in plan and DEMO in plan
    assert DEV not in plan and "[dev" not in plan


@pytest.mark.parametrize("target", ["test", "lint"])
def test_test_and_lint_from_nothing_install_the_toolchain(tmp_path, target):
    plan = _plan(tmp_path / "v", target)
    assert "-m venv" in plan and TORCH in plan and DEV in plan


def test_test_after_demo_adds_only_the_toolchain(tmp_path):
    v = tmp_path / "v"
    _stamp(v, ".llmdiag-torch", ".llmdiag-demo")
    plan = _plan(v, "test")
    assert DEV in plan and TORCH not in plan and "-m venv" not in plan


def test_demo_after_test_installs_nothing(tmp_path):
    v = tmp_path / "v"
    _stamp(v, ".llmdiag-torch", ".llmdiag-installed", ".llmdiag-demo")
    plan = _plan(v, "demo")
    assert "-m pip" not in plan and "llmdiag run" in plan
