"""The terminal's one table layout (`gate.format.fit`) and its one escape, on generated analyses: every line within
80, 100 and 160 columns, every long name printed in full once (a legend under its table), every column headed,
a path said once, and no trace or manifest string reaching the terminal raw."""

from __future__ import annotations

import os
import re

import pytest

from llmdiag.diagnose.cli import terminal
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.gate.format import fit, prose
from llmdiag.diagnose.model.analysis import Issue
from llmdiag.diagnose.model.names import demangle
from llmdiag.diagnose.model.skew import Straggler
from llmdiag.diagnose.model.views import kernel_table
from tests.gen.summaries import analysis, busy, typed

WIDTHS = (80, 100, 160)
OSC52 = "\x1b]52;c;ZXZpbA==\x07"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what printable() escapes


def flat(text: str) -> str:
    """The text without whitespace: a name wrapped over lines (or folded in a cell) still reads whole."""
    return "".join(text.split())


def headed(text: str) -> list[str]:
    """The tables' columns with no header: for each `---- ----` rule, the header line above it must hold text
    over every dash group."""
    lines, bare = text.splitlines(), []
    for i, line in enumerate(lines):
        if i and re.fullmatch(r"-+( +-+)+", line):
            for m in re.finditer(r"-+", line):
                if not lines[i - 1][m.start():m.end()].strip():
                    bare.append(f"{lines[i - 1]!r} [{m.start()}:{m.end()}]")
    return bare


def long_names(a):
    """Top kernels whose names share a 150-character prefix and differ at the end (templated C++ kernels)."""
    base = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::" \
           "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}>"
    for r in a.ranks:
        for j, k in enumerate(r.top_kernels):
            k.name = base + f"::variant_{j}(int, float*)"
    return a


@pytest.mark.parametrize("width", WIDTHS)
def test_lines_fit_and_every_top_kernel_is_printed_in_full(width):
    a = long_names(typed(busy(8)))
    text = render(a, width=width)
    assert [x for x in text.splitlines() if len(x) > width] == []
    names = [demangle(k.name) for k in kernel_table(a, terminal.TOP_KERNELS)]
    assert len(names) >= 2
    assert [n for n in names if flat(n) not in flat(text)] == []
    assert headed(text) == []


def test_a_name_that_fits_is_not_keyed_and_one_that_does_not_is():
    rows = [["short_op", "1.0"], ["x" * 120 + "_tail", "2.0"]]
    text = fit(["op", "ms"], rows, 80)
    assert "short_op " in text and "[1] " in text and "[2]" not in text
    legend = text.split("\n  [1] ", 1)[1]
    assert flat(legend) == "x" * 120 + "_tail" and all(len(x) <= 80 for x in text.splitlines())


def test_sequences_sharing_a_long_prefix_read_differently_at_80_columns():
    base = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_" + "x" * 60
    seqs = [" → ".join(f"{base}_{k}" for k in ks) for ks in (("a", "b"), ("a", "c"), ("b", "a", "c"))]
    text = fit(["op", "kernels", "ms"], [["autograd::Backward0", s, "1.0"] for s in seqs], 80, names={0}, seqs={1})
    body = [x for x in text.splitlines() if x.startswith("autograd")]
    assert len(body) == 3 and len(set(body)) == 3, text
    assert all(flat(f"{base}_{k}") in flat(text) for k in "abc")


def test_every_column_is_headed_including_the_step_outlier_column():
    a = typed(busy(8))
    for width in WIDTHS:
        text = render(a, width=width)
        assert "Per step" in text and headed(text) == []


def test_a_path_is_said_once_and_long_straggler_lines_wrap():
    a = typed(busy(8))
    path = "runs/" + "very_long_folder_name/" * 6 + "rank3.pt.trace.json.gz"
    a.issues = [Issue(file=path, message=f"warning number {i}: device side ran past the next step", rank=3)
                for i in range(11)]
    a.skew.stragglers = [Straggler(rank=3, reason="arrives last at 8 of 11 alltoall " * 6, value=0.7, kind="alltoall")]
    text = render(a, width=80)
    assert flat(text).count("rank3.pt.trace.json.gz") == 1 and flat(path) in flat(text)
    assert all(f"warning number {i}:" in text for i in range(11))
    assert [x for x in text.splitlines() if len(x) > 80] == []


def test_issues_on_relative_and_absolute_paths_together():
    """A folder's own issue names it as given (relative) beside its files' absolute names: one place, said once,
    under the folder they share (this raised ValueError in os.path.commonpath)."""
    a = typed(busy(8))
    here = os.path.abspath("runs/demo")
    a.issues = [Issue(file="runs/demo", message="the input holds 2 runs"),
                Issue(file=f"{here}/rank0.json", message="device side ran past", rank=0),
                Issue(file=f"{here}/rank1.json", message="device side ran past", rank=1),
                Issue(file=here, message="step 5 is an outlier")]
    text = render(a, width=400)
    assert f"Issues (files in {os.path.dirname(here)}/)" in text
    assert all(text.count(f) == 1 for f in ("in demo:", "in demo/rank0.json:", "in demo/rank1.json:")), text


def poison(d, evil: str):
    """Every string of a summary dict with `evil` appended (keys kept): a hostile summary read back."""
    if isinstance(d, dict):
        return {k: poison(v, evil) for k, v in d.items()}
    if isinstance(d, list):
        return [poison(v, evil) for v in d]
    return d + evil if isinstance(d, str) else d


@pytest.mark.parametrize("evil", [OSC52, "\x9b2J\u202e\x1b[2J", "\n::error::forged\r"])
def test_no_string_of_a_hostile_summary_reaches_the_terminal_raw(evil):
    a = typed(poison(analysis(8, pipeline=True).to_dict(), evil))
    a.issues.append(Issue(file="f" + evil, message="m" + evil, severity="warning" + evil))
    for width in (80, 160):
        text = render(a, width=width)
        assert RAW.findall(text) == [], width
    assert "\\x1b" in text or "\\x9b" in text or "\\n" in text  # escaped, not dropped


def test_cards_and_diff_titles_are_escaped():
    cards = terminal._cards("What-if", [("top" + OSC52, "aten::mm" + OSC52, "note" + OSC52)])
    assert "\x1b" not in cards and "\x07" not in cards and cards.count("\\x1b") == 3
    title = prose(["", "Pipeline (1f1b" + OSC52 + " vs -)", "a\nb" + OSC52])
    assert "\x1b" not in title and "\x07" not in title


@pytest.mark.parametrize("width", [40, 41, 42, 43, 44, 45, 46])
def test_a_share_and_its_percent_sign_stay_on_one_line(width):
    """The job path's paragraph wrapped "cpu 25.4" at a line's end and "%" at the next's start (80 columns, torchrec
    sst_long_a2a_optimizer_3): a number and its " %" are kept together, wherever the line breaks."""
    from llmdiag.diagnose.cli.terminal_layout import WIDTH, _wrap

    text = "typical step #6: 161.77 ms (compute 63.3 %, cpu 25.4 %, comm 7.3 %, kernel-kernel 3.9 %)."
    tok = WIDTH.set(width)
    try:
        out = _wrap(text)
    finally:
        WIDTH.reset(tok)
    lines = out.split("\n")
    assert not any(ln.lstrip().startswith("%") for ln in lines)
    assert " ".join(ln.strip() for ln in lines) == text  # nothing lost, no stray glue left
    assert max(map(len, lines)) <= width
