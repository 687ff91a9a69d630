"""CSV tables as an attack on the spreadsheet that opens them (issue 35, medium 1 and low "raw ESC/BEL").

Before: a kernel or op name `gemm\\r=cmd|' /C calc'!A0` was written unquoted (the csv module quotes only its
own line terminator, `\\n`), so a reader that starts a row at a lone CR got a formula cell; ESC and BEL went
into cells raw. Now every control character is a visible escape, a formula start gets an apostrophe, and any
field with a comma, quote, CR or LF is quoted.
"""

from __future__ import annotations

import csv
import re

from llmdiag.diagnose.export.csv_tables import cell, field
from tests.adversarial.conftest import attack, check
from tests.gen.builder import TraceBuilder

HOSTILE = ["gemm\r=cmd|' /C calc'!A0", "k\n+SUM(1)", "x\x1b]52;c;ZWNobw==\x07y", '@a,"b"', "-2+3", "\t=1"]


def _rank(r: int) -> TraceBuilder:
    b = TraceBuilder(rank=r, world_size=2)
    for k in range(1, 3):
        k0 = (k - 1) * 1000
        b.step(k, k0, k0 + 1000)
        for i, name in enumerate(HOSTILE):
            b.cpu_op(name, k0 + 10 + 100 * i, 30)
            b.kernel(name, k0 + 20 + 100 * i, 50, launch_at=k0 + 15 + 100 * i)
    return b


def test_hostile_names_are_inert_in_every_csv(tmp_path):
    d = tmp_path / "run"
    for r in (0, 1):
        _rank(r).write(d / f"rank{r}.json")
    out = tmp_path / "t"
    res = attack("analyze", d, "-q", "--no-report", "--json", tmp_path / "s.json", "--tables", out, "--format", "csv",
                 cwd=tmp_path)
    check(res, 0, one_line=False)
    texts = {p.name: p.read_bytes() for p in out.glob("*.csv")}
    assert texts and any(b"calc" in t for t in texts.values())
    for name, raw in texts.items():
        assert not re.search(rb"[\x00-\x09\x0b-\x1f\x7f]", raw), name  # no CR, ESC, BEL, tab: only the row's LF
        # a reader that ignores quotes and splits at every line break sees no formula start either
        for line in raw.split(b"\n"):
            for c in line.split(b","):
                assert not c.lstrip(b'"').startswith((b"=", b"+", b"-", b"@")) or re.fullmatch(rb'-?[0-9.e+-]+', c), \
                    (name, c)
        rows = list(csv.reader(raw.decode().splitlines()))  # and an RFC 4180 reader gets whole rows back
        assert len({len(r) for r in rows}) == 1, name
    kernels = texts["kernels.csv"].decode()
    assert "gemm\\r=cmd|' /C calc'!A0" in kernels and "'-2+3" in kernels and "x\\x1b]52;c;ZWNobw==\\x07y" in kernels


def test_cells_and_fields():
    assert cell("gemm\r=cmd", "str") == "gemm\\r=cmd"
    assert cell("=1", "str") == "'=1" and cell("-x", "str") == "'-x" and cell("\t=1", "str") == "\\t=1"
    assert cell(None, "str") == "" and cell(-2.5, "f64") == "-2.5"
    assert field('a,"b"') == '"a,""b"""' and field("a\rb") == '"a\rb"' and field("plain") == "plain"
