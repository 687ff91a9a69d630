"""docs/robustness.md's adversarial section and this suite, one to one: every test here is named there (by its
function or its file), and every test name there exists here. (The gate's files, test_adv_gate_*, are
documented with the gate.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "robustness.md"
SECTION = "## Adversarial inputs: bounded work and safe outputs (issue 29)"


def _section() -> str:
    text = DOC.read_text()
    assert SECTION in text
    rest = text.split(SECTION, 1)[1]
    return rest.split("\n## ", 1)[0]


def _tests() -> dict[str, list[str]]:
    out = {}
    for f in sorted(HERE.glob("test_adv_*.py")):
        if f.name.startswith("test_adv_gate") or f.name == Path(__file__).name:
            continue
        tree = ast.parse(f.read_text())
        out[f.name] = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return out


def test_every_test_is_documented():
    doc = _section()
    missing = [f"{f}::{t}" for f, ts in _tests().items() if f not in doc for t in ts if t not in doc]
    assert not missing, missing


def test_every_documented_test_exists():
    tests = _tests()
    known = set(tests) | {t for ts in tests.values() for t in ts} | {"test_properties.py"}
    section = _section()
    # a test elsewhere in the suite, named by its path from the repository root, must exist there
    paths = set(re.findall(r"\btests/[\w/]+/test_\w+\.py", section))
    assert all((HERE.parents[1] / p).is_file() for p in paths), sorted(p for p in paths if not (HERE.parents[1] / p).is_file())
    named = set(re.findall(r"\btest_\w+(?:\.py)?", re.sub(r"\btests/[\w/]+/test_\w+\.py", "", section)))
    assert not named - known, sorted(named - known)
