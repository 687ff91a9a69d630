"""The tests that read ../shared/fixtures/real skip with one wording (tests/conftest.py), and not at all in CI.

Six wordings had grown ("../shared/fixtures/real not present", "shared real-trace fixtures not present",
"kineto samples absent", ...), and each hand-written `skipif` also skipped under LLMDIAG_REQUIRE_REAL=1, where CI
means absence to fail."""

from __future__ import annotations

import re
from pathlib import Path


from tests import conftest

TESTS = Path(__file__).resolve().parents[1]


def test_one_wording_for_an_absent_folder_and_an_absent_file(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMDIAG_REQUIRE_REAL", raising=False)
    monkeypatch.setattr(conftest, "REAL", str(tmp_path / "real"))
    assert conftest.real_skip_reason() == f"needs the real traces in {tmp_path / 'real'} (absent in this clone)"
    assert conftest.real_skip_reason("hta/x.json.gz") == conftest.real_skip_reason()
    (tmp_path / "real" / "hta").mkdir(parents=True)
    (tmp_path / "real" / "hta" / "x.json.gz").write_bytes(b"")
    assert conftest.real_skip_reason() is None
    assert conftest.real_skip_reason("hta/x.json.gz", tmp_path / "real" / "hta") is None
    assert conftest.real_skip_reason("hta/y.json.gz") == \
        f"needs the real traces in {tmp_path / 'real'} (hta/y.json.gz absent in this clone)"


def test_ci_never_skips(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMDIAG_REQUIRE_REAL", "1")
    monkeypatch.setattr(conftest, "REAL", str(tmp_path / "absent"))
    assert conftest.real_skip_reason("hta/x.json.gz") is None  # no skip: the test goes on and fails on the file


def test_no_test_words_its_own_real_fixture_skip():
    """A skip whose condition or reason names the real traces goes through `@pytest.mark.real(...)`."""
    own = []
    for f in TESTS.rglob("*.py"):
        if f.name == "conftest.py" and f.parent == TESTS:
            continue
        text = f.read_text()
        for m in re.finditer(r"(skipif\(|pytest\.skip\()(.{0,300})", text, re.S):
            call = re.split(r"\)\s*\]?\n", m.group(2))[0]  # to the call's end
            if re.search(r"shared|fixtures/real|REAL\b|REAL[ /.]|HTA|TORCHREC|MI300|PAIR|KINETO", call):
                own.append(f"{f.relative_to(TESTS)}: {m.group(0)[:80]!r}")
    assert not own, own
