"""The terminal output as a reader sees it: fitted to the width, names cut in the middle so two kernels stay
distinct, prose wrapped, severity coloured only on a tty, `-q` clean, absolute paths, help with examples."""

from __future__ import annotations

import re

from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.rules import findings
from tests.gen.builder import gpu_rank
from tests.gen.summaries import analysis, busy, typed

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _long_kernels(a):
    base = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::" \
           "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}>"
    for r in a.ranks:
        r.top_kernels[0].name = base + "::float_variant(int)"
        r.top_kernels[1].name = base + "::half_variant(int)"
    return a


def test_fits_the_width_and_keeps_names_distinct():
    a = _long_kernels(typed(busy(8)))
    a.findings = findings(a)
    for width in (80, 120):
        text = render(a, width=width)
        long = [line for line in text.splitlines() if len(line) > width]
        assert long == [], (width, long[:3])
        rows = [line for line in text.splitlines() if "…" in line and "_variant" in line]
        assert len(rows) >= 2 and len({r.split("  ")[0] for r in rows}) == len(rows)  # two names, two texts
    assert "float_variant" in render(a, width=200) and "rank(s)" not in text.splitlines()[0]


def test_colour_only_when_asked():
    a = typed(busy(8))
    a.findings = findings(a)
    assert not ANSI.search(render(a))
    coloured = render(a, colour=True)
    assert ANSI.search(coloured) and ANSI.sub("", coloured) == render(a)


def test_quiet_is_clean_and_paths_are_absolute(tmp_path, monkeypatch):
    d = tmp_path / "run"
    for r in range(2):
        gpu_rank(r).write(d / f"rank{r}.json")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["analyze", str(d), "-q", "--json", "s.json", "--report", "r.html"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines == [f"summary: {tmp_path / 's.json'}", f"report:  {tmp_path / 'r.html'}"], lines
    assert not ANSI.search(res.output)  # not a tty: no colour codes


def test_help_has_examples_and_whole_sentences():
    top = CliRunner().invoke(main, ["--help"]).output
    for line in top.splitlines():
        if line.startswith("  ") and not line.strip().startswith("-"):
            assert "..." not in line, line  # click cuts long first lines with "..."
    for cmd in ("run", "analyze", "check", "diff"):
        out = CliRunner().invoke(main, [cmd, "--help"]).output
        assert "Examples:" in out and re.search(rf"^\s+llmdiag {cmd} \S", out.split("Examples:", 1)[1], flags=re.M), (cmd, out[:400])


def test_one_rank_reads_singular():
    text = render(analysis(1))
    assert "1 rank analysed" in text and "rank(s)" not in text


def test_per_rank_rows_are_most_exposed_first_in_the_ms_shown():
    """The header says 'most exposed communication first' and the column is ms: a rank with more exposed ms in
    a longer step comes first even where its exposed fraction is smaller."""
    a = typed(busy(4))
    for r, (exposed, step) in zip(a.ranks, [(10.0, 100.0), (15.0, 300.0), (12.0, 120.0), (1.0, 100.0)]):
        r.exposed_comm_ms, r.step_time_ms, r.exposed_comm_frac = exposed, step, exposed / step
    text = ANSI.sub("", render(a, width=200))
    table = text[text.index("Step breakdown per rank"):].split("\n\n")[0].splitlines()
    rows = [line.split()[0] for line in table if line[:1].isdigit()]
    assert rows == [str(a.ranks[i].rank) for i in (1, 2, 0, 3)]


def test_gloo_p2p_counted_as_bubble_is_said_beside_the_headline_and_the_table():
    """On a CPU pipeline run the headline's exposed communication is 0 while the per-op table lists send/recv
    with exposed time: both places say that blocked gloo p2p is the bubble (one sentence, views.p2p_bubble_note),
    and only where the trace is CPU and has send/recv."""
    from llmdiag.reports.render import render_html
    from tests.gen.summaries import summary

    s = summary(2)
    s["trace_kind"] = "cpu"
    s["aggregate"]["overlap_ratio_mean"] = s["aggregate"]["overlap_ratio_min"] = None
    for r in s["ranks"]:
        r["comm_by_kind"] = r["comm_by_kind"][:1]
        r["comm_by_kind"][0]["kind"] = "send"
    cpu = typed(s)
    text = ANSI.sub("", render(cpu, width=200))
    assert "pipeline send/recv only, counted as bubble" in text and "no communication" not in text
    assert "that wait is the pipeline bubble" in text and "that wait is the pipeline bubble" in render_html(cpu)
    s["trace_kind"] = "gpu"
    gpu = typed(s)
    assert "that wait is the pipeline bubble" not in ANSI.sub("", render(gpu, width=200)) + render_html(gpu)
