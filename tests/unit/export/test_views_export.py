"""The HTA / TraceLens views at the edges: CSV beside Parquet (same rows, formula cells defused, no pyarrow
needed), one rank's events as a DataFrame (op parent and launch delay checked against the trace built here),
and the terminal and report printing the same op → kernel and launch numbers."""

from __future__ import annotations

import csv
import os
import re
import sys

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.export.csv_tables import write_csv
from llmdiag.diagnose.export.events import events
from llmdiag.diagnose.export.tables import TABLES, write_tables
from tests.gen.builder import TraceBuilder

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}]
BF16 = "c10::BFloat16"


def _trace(rank: int = 0, op: str = "aten::mm") -> TraceBuilder:
    """Per step: `op` (host 10..40 µs after the step start) launching a 100 µs GEMM at +20 that starts at +100;
    aten::add (60..80) launching a 5 µs kernel at +70 that starts at +300; a kernel launched outside any op."""
    b = TraceBuilder(rank=rank, world_size=2, device_properties=H100)
    for k in range(1, 3):
        k0 = (k - 1) * 1000
        b.step(k, k0, k0 + 1000)
        b.cpu_op(op, k0 + 10, 30, args={"Input type": [BF16, BF16], "Input Dims": [[64, 128], [128, 256]]})
        b.kernel("sm90_gemm_kernel", k0 + 100, 100, launch_at=k0 + 20)
        b.cpu_op("aten::add", k0 + 60, 20, args={"Input type": [BF16], "Input Dims": [[4]]})
        b.kernel("add_kernel", k0 + 300, 5, launch_at=k0 + 70)
        b.kernel("lonely_kernel", k0 + 400, 10, launch_at=k0 + 90)
    return b


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("views")
    for r in range(2):
        _trace(r, "=cmd|' /C calc'!A0" if r == 1 else "aten::mm").write(d / "run" / f"rank{r}.pt.trace.json")
    return str(d / "run"), analyze_path(str(d / "run"), rules=False, jobs=1)


def test_csv_rows_equal_parquet_rows(run, tmp_path):
    _, a = run
    write_tables(a, str(tmp_path / "t"))
    paths = write_csv(a, str(tmp_path / "t"))
    assert {os.path.basename(p)[:-4] for p in paths} >= {"op_kernels", "roofline", "launches", "queue", "steps"}
    for name in ("op_kernels", "launches", "queue", "roofline", "steps", "kernels"):
        with open(tmp_path / "t" / f"{name}.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        table = pq.read_table(tmp_path / "t" / f"{name}.parquet").to_pylist()
        assert rows[0] == [c for c, _, _ in TABLES[name][1]] and len(rows) - 1 == len(table), name
        for got, want in zip(rows[1:], table):
            for c, v in zip(rows[0], got):
                w = want[c]
                if w is None:
                    assert v == "", (name, c)
                elif isinstance(w, float):
                    assert float(v) == pytest.approx(w), (name, c)
                elif isinstance(w, str) and w.startswith("="):
                    assert v == "'" + w, (name, c)  # a formula from a trace is text in a spreadsheet
                else:
                    assert v == str(w), (name, c)
    ops = pq.read_table(tmp_path / "t" / "op_kernels.parquet").to_pylist()
    assert {(o["op"], o["ranks"], o["count"]) for o in ops} == {("aten::mm", 1, 2), ("=cmd|' /C calc'!A0", 1, 2),
                                                               ("aten::add", 2, 4), ("(no host op)", 2, 4)}


def test_cli_format_csv_needs_no_pyarrow(run, tmp_path, monkeypatch):
    path, _ = run
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    res = CliRunner().invoke(main, ["analyze", path, "--no-report", "-q", "--json", str(tmp_path / "s.json"),
                                    "--jobs", "1", "--tables", str(tmp_path / "t"), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert "CSV files" in res.output and not [f for f in os.listdir(tmp_path / "t") if f.endswith(".parquet")]
    assert os.path.isfile(tmp_path / "t" / "launches.csv")


def test_events_frame(run):
    path, _ = run
    df = events(path, rank=0, pandas=False).to_pylist()  # a pyarrow Table
    dev = [e for e in df if e["stream"] >= 0]
    want = {"sm90_gemm_kernel": ("aten::mm", 80.0), "add_kernel": ("aten::add", 230.0), "lonely_kernel": ("", 310.0)}
    assert len(dev) == 6
    for e in dev:
        assert (e["op"], e["launch_delay_us"]) == want[e["name"]]
        assert e["step"] in (1, 2) and e["kind"] == "compute"
    launches = [e for e in df if e["name"] == "cudaLaunchKernel"]
    assert len(launches) == 6 and {e["op"] for e in launches} == {"aten::mm", "aten::add", ""}  # its enclosing op
    mm = [e for e in df if e["name"] == "aten::mm"]
    assert [e["op"] for e in mm] == ["", ""]  # no host op encloses it (ProfilerStep is an annotation)
    pdf = events(path, rank=1)  # pandas where installed
    assert list(pdf.columns)[:3] == ["name", "cat", "kind"] and (pdf["stream"] >= 0).sum() == 6


def test_events_rank_not_found_is_one_line(run):
    path, _ = run
    from llmdiag.diagnose.errors import LlmdiagError

    with pytest.raises(LlmdiagError, match="no trace of rank 7"):
        events(path, rank=7)


def test_terminal_and_report_print_the_same_numbers(run, tmp_path):
    _, a = run
    text = render(a, width=200)
    assert "Op → kernel" in text and "Kernel launches per rank" in text
    from llmdiag.reports.render import render_report

    html = open(render_report(a, str(tmp_path / "r.html")), encoding="utf-8").read()
    assert 'id="kernel-views"' in html and "GEMM and attention against the roofline" in html
    assert "=cmd|&#39; /C calc&#39;!A0" in html or "=cmd|&#x27; /C calc&#x27;!A0" in html  # escaped
    section = re.sub(r"<[^>]+>", " ", html[html.index('id="kernel-views"'):])
    # the launch delay of aten::mm (80 µs, both ranks) and the (no host op) row's (310 µs) in both outputs
    for number in ("80.0", "310.0", "230.0"):
        assert number in text and number in section
