"""Terminal tables and prose at the reader's width: `COLUMNS` when set, the terminal's width on a tty, 100 off one;
`analyze`, `check` and `diff` alike (one table function, `llmdiag.diagnose.gate.format.table`, through rich)."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.gate.format import DEFAULT_WIDTH, table, terminal_width
from tests.unit.gate.test_gate import make_analysis, make_summary

LONG = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl, "
        "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2>)")


def test_width_from_columns_else_default_off_a_tty(monkeypatch):
    monkeypatch.setenv("COLUMNS", "73")
    assert terminal_width() == 73
    monkeypatch.delenv("COLUMNS")
    assert terminal_width() == DEFAULT_WIDTH == 100  # pytest captures stdout: not a tty


@pytest.mark.parametrize("width", [50, 80, 120])
def test_table_fits_and_keeps_every_character(width):
    rows = [[LONG, "kernel", "12.00", "+1.00 (+9.1%)"], ["aten::mm", "op", "3.50", "-0.20 (-5.4%)"]]
    text = table(["name", "kind", "A", "B - A"], rows, right={2, 3}, width=width)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width, text
    assert set(LONG.replace(" ", "")) <= set("".join(lines).replace(" ", ""))
    assert "".join(lines).replace(" ", "").count("+1.00(+9.1%)") == 1  # numbers never fold
    assert lines[1].startswith("----")


def _cli(args, columns):
    from llmdiag.diagnose.cli.gate import check, diff

    cmd = {"check": check, "diff": diff}[args[0]]
    return CliRunner().invoke(cmd, [str(a) for a in args[1:]], env={"COLUMNS": str(columns), "GITHUB_ACTIONS": ""})


@pytest.mark.parametrize("columns", [80, 132])
def test_check_and_diff_follow_columns(tmp_path, columns):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(orjson.dumps(make_summary(n=2, name="baseline-run", kernels={LONG: 30.0, "aten::mm": 5.0})))
    b.write_bytes(orjson.dumps(make_summary(n=2, name="current-run", overlap=0.5, kernels={LONG: 45.0})))
    for args in (["diff", a, b], ["check", b, "--baseline", a]):
        r = _cli(args, columns)
        assert r.exit_code in (0, 1), r.output
        lines = r.output.splitlines()
        assert sum("  " in line.strip() for line in lines) >= 4  # table rows are there
        long = [line for line in lines if len(line) > columns and " " in line.strip()]  # one word (a path) may not fit
        assert long == [], (args[0], long[:3])


def test_analyze_tables_follow_columns(monkeypatch):
    from llmdiag.diagnose.cli.terminal import render

    a = make_analysis(n=4, kernels={LONG: 30.0, "aten::mm": 5.0})
    for cols in (70, 150):
        monkeypatch.setenv("COLUMNS", str(cols))
        lines = render(a).splitlines()
        assert max(map(len, lines)) <= cols, [x for x in lines if len(x) > cols][:3]


def test_flops_row_names_no_unit_its_values_do_not_use():
    """0.45 TFLOP/s prints as 450.0 GFLOP/s: the row's name must not say TFLOP/s beside it."""
    from llmdiag.diagnose.gate.diff import compare, render_text

    a, b = make_analysis(n=2), make_analysis(n=2)
    a.aggregate.achieved_tflops_per_device, b.aggregate.achieved_tflops_per_device = 0.45, 1.5
    line = next(x for x in render_text(compare(a, b)).splitlines() if x.startswith("achieved FLOP/s"))
    assert "450.0 GFLOP/s" in line and "1.5 TFLOP/s" in line
    assert not line.split("450.0")[0].strip().endswith("TFLOP/s per device"), line


def test_a_table_too_wide_to_fit_keeps_every_number():
    """Nine columns of '12,345.67 ms' cannot fit 60 columns: the table runs wider, never cuts a number (it
    may put the unit under the value: numbers wrap between words only)."""
    rows = [["aten::mm_very_long_name"] + [f"{k},345.67 ms" for k in range(10, 18)]]
    text = table(["name"] + [f"col{i}" for i in range(8)], rows, right=set(range(1, 9)), width=60)
    assert all(f"{k},345.67" in text for k in range(10, 18)), text
    assert text.count("ms") == 8
    assert "aten::mm_v" in text and "ery_long_n" in text  # the name folds at MIN_TEXT, whole


def test_quiet_analysis_does_not_import_rich(tmp_path):
    """rich is imported where a table is printed, not by an analysis that prints none (-q)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.unit.engine.test_engine import _folder

    src = _folder(tmp_path / "run")
    root = Path(__file__).resolve().parents[3]
    code = ("import sys, runpy; sys.argv = ['llmdiag', 'analyze', %r, '--no-report', '-q', '--json', %r]\n"
            "try:\n    from llmdiag.diagnose.cli.main import main\n    main()  # not entry(): it leaves by os._exit\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('RICH', 'rich' in sys.modules)" % (str(src), str(tmp_path / "out.json")))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 0, p.stderr
    assert "RICH False" in p.stdout, p.stdout + p.stderr
