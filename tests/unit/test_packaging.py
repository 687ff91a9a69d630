"""One import name: the wheel installs `llmdiag` and nothing else at the top of site-packages, with the card's
three folders inside it (llmdiag.diagnose, llmdiag.reports with its templates, llmdiag.workloads) and the
console script pointing into it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEEP = ("pyproject.toml", "README.md", "llmdiag", "diagnose", "reports", "workloads")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("src")
    for name in KEEP:  # a copy: building writes build/ and *.egg-info beside the sources
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(p, src / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, capture_output=True, text=True, timeout=300)
    (whl,) = out.glob("llmdiag-*.whl")
    return zipfile.ZipFile(whl)


def test_only_llmdiag_at_the_top(wheel):
    tops = {n.split("/")[0] for n in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"llmdiag"}
    info = next(t for t in tops if t.endswith(".dist-info"))
    assert wheel.read(f"{info}/top_level.txt").decode().split() == ["llmdiag"]
    assert "llmdiag = llmdiag.diagnose.cli.main:entry" in wheel.read(f"{info}/entry_points.txt").decode()


def test_the_card_folders_are_inside_it(wheel):
    names = set(wheel.namelist())
    for must in ("llmdiag/__init__.py", "llmdiag/diagnose/analyze.py", "llmdiag/diagnose/metrics/rank/per_rank.py",
                 "llmdiag/diagnose/metrics/job/cross_rank.py", "llmdiag/reports/render.py",
                 "llmdiag/reports/templates/report.html.j2", "llmdiag/workloads/train.py"):
        assert must in names, must
    assert not [n for n in names if n.startswith("llmdiag/") and "/tests/" in n]


def test_import_llmdiag_is_the_public_api_and_cheap():
    code = ("import sys, llmdiag; assert 'llmdiag.diagnose.analyze' not in sys.modules and 'numpy' not in sys.modules; "
            "from llmdiag import Analysis, analyze_path, read_summary, render_report, findings, LlmdiagError; "
            "print(llmdiag.__version__, analyze_path.__module__)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [__import__("llmdiag").__version__, "llmdiag.diagnose.analyze"]


def test_a_bare_folder_name_refuses_to_import():
    p = subprocess.run([sys.executable, "-c", "import diagnose"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "llmdiag's only import name is `llmdiag`" in p.stderr
