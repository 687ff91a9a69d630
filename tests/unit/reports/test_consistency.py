"""One analysis, four outputs, one number each: the terminal, the HTML report, the JSON summary and `diff`
print every shared quantity identically (same view, same unit, same rounding).

Run on a 64-rank synthetic analysis, a real GPU fixture and a real CPU run (slow: torchrun). The JSON side is
the summary read back (`Analysis.from_dict`): every view of it must equal the view of the live analysis; the
diff side is `diff` of the analysis against that read-back copy, so its "A" column is the live one.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.gate.diff import compare, render_text
from llmdiag.diagnose.model import views
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.format import fmt, fmt_gain
from llmdiag.diagnose.rules import findings
from llmdiag.reports.render import render_html
from tests.gen.summaries import busy, typed

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
COMM_TITLE = "Communication per collective and process group (per step"
KERNEL_TITLE = "Top kernels / ops over ranks (per step"
STEP_TITLE = "Step breakdown per rank (ms per step"
PIPE_TITLE = "Pipeline bubbles per stage"


def _terminal_rows(text: str, title: str) -> list[list[str]]:
    """Cells of one terminal table (split on runs of 2+ spaces), after its title, header and rule."""
    assert "\n" + title in text, f"no terminal table {title!r}"
    lines = text.split("\n" + title)[1].split("\n\n")[0].splitlines()[3:]
    return [re.split(r"\s{2,}", line.strip()) for line in lines if not line.startswith(" ")]  # notes are indented


def _report_rows(html: str, section: str, table: int = 0) -> list[list[str]]:
    sec = html.split(f'id="{section}"')[1].split("</section>")[0]
    body = re.findall(r"<tbody>(.*?)</tbody>", sec, flags=re.S)[table]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)]


def _tagged(html: str, key: str) -> str:
    """The text of the number the report tags with summary path `key`."""
    m = re.search(rf'data-k="{re.escape(key)}"[^>]*>([^<]*)<', html)
    assert m, f"report does not print {key}"
    return m.group(1)


def _diff_line(text: str, name: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith(name + "  ")]
    assert len(lines) == 1, f"diff has {len(lines)} rows named {name!r}"
    return lines[0]


def _outputs(a: Analysis):
    b = Analysis.from_dict(orjson.loads(orjson.dumps(a.to_dict())), "round trip")
    c = compare(a, b)
    return render(a), render_html(a), b, c, render_text(c)


def assert_consistent(a: Analysis) -> None:
    text, html, b, c, dtext = _outputs(a)
    rows = {r.name: r for s in c.sections for r in s.rows}

    # JSON: the summary read back is the same analysis, so every view of it is identical
    assert b == a
    for view in (views.comm_by_group, views.per_step, views.memory_use):
        assert view(b) == view(a)
    assert views.kernel_table(b, None) == views.kernel_table(a, None)

    # communication per (kind, group): terminal, report and diff print the view's numbers
    groups = views.comm_by_group(a)
    if groups:
        term, rep = _terminal_rows(text, COMM_TITLE), _report_rows(html, "overlap")
        assert len(term) == len(rep) == len(groups)
        for g, t, r in zip(groups, term, rep, strict=True):
            nums = [fmt(g.ops_per_step, "avg"), fmt(g.time_ms_per_step, "ms", False),
                    fmt(g.exposed_ms_per_step, "ms", False)]
            assert t[0] == r[0] == g.kind and t[4:7] == nums and r[4:7] == nums
            assert t[7] == fmt(g.overlap, "pct") and r[7] in (fmt(g.overlap, "pct"), fmt(g.overlap, "pct", False))
            name = next(n for n in rows if n.startswith(g.kind) and n[len(g.kind)] in " :" and n.endswith(": ms per step")
                        and (g.pg in n) and rows[n].a == g.time_ms_per_step)
            assert fmt(g.time_ms_per_step, "ms") in _diff_line(dtext, name)

    # kernels: the same rows in the terminal and the report, and diff's "A" column of a changed run
    kernels = views.kernel_table(a, 10)
    term = _terminal_rows(text, KERNEL_TITLE)
    assert len(term) == len(kernels)
    rep = _report_rows(html, "kernels")
    for k, t, r in zip(kernels, term, rep):
        nums = [str(k.ranks), fmt(k.ms_per_step, "ms", False), fmt(k.count_per_step, "avg")]
        assert t[2:5] == nums and r[2:5] == nums, (k.name, t, r)
        assert t[6] == fmt(k.share, "pct")
    slower = Analysis.from_dict(a.to_dict())
    for r in slower.ranks:
        for k in r.top_kernels:
            k.total_ms *= 2
    grew = {x.name: x for x in compare(a, slower).kernels.grew}
    for k in kernels[:5]:
        assert grew[k.name].a == k.ms_per_step

    # per-rank step time: terminal, report (tagged with its JSON path) and diff's per-rank rows
    shown = {t[0]: t for t in _terminal_rows(text, STEP_TITLE)}
    for i, r in enumerate(a.ranks):
        want = fmt(r.step_time_ms, "ms", False)
        if str(r.rank) in shown:
            assert shown[str(r.rank)][2] == want
        if f'data-k="ranks.{i}.step_time_ms"' in html:
            assert _tagged(html, f"ranks.{i}.step_time_ms") in (want, fmt(r.step_time_ms, "ms"))
    # diff's per-rank rows list the ranks that changed (largest change first, at most 16 per metric)
    moved = Analysis.from_dict(a.to_dict())
    for i, r in enumerate(moved.ranks[:3]):
        r.step_time_ms *= 1.1 + 0.1 * i
    mc = compare(a, moved)
    mrows, mtext = {x.name: x for s in mc.sections for x in s.rows}, render_text(mc)
    for r in a.ranks[:3]:
        assert mrows[f"rank {r.rank} step_time"].a == r.step_time_ms
        assert fmt(r.step_time_ms, "ms") in _diff_line(mtext, f"rank {r.rank} step_time")
    assert not any(n.endswith(" step_time") and n.startswith("rank ") for n in rows)  # unchanged: not listed

    # pipeline bubble per stage
    if a.pipeline:
        term = {t[0]: t for t in _terminal_rows(text, PIPE_TITLE)}
        for i, sb in enumerate(a.pipeline.stage_bubbles):
            want = fmt(sb.measured, "pct")
            assert term[str(sb.stage)][3] == want
            assert _tagged(html, f"pipeline.stage_bubbles.{i}.measured") in (want, fmt(sb.measured, "pct", False))
            assert want in _diff_line(dtext, f"bubble, stage {sb.stage} (rank {sb.rank})")

    # findings: the same order, the same gain and share everywhere
    assert b.findings == a.findings
    titles = [re.sub(r" — (≈|up to) .*$", "", t) for t in re.findall(r"^  \[(?:high|medium|low)\] (.*)$", text, flags=re.M)]
    assert titles == [f.title for f in a.findings[:len(titles)]]
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))
    for f in a.findings:
        if f.gain_ms is not None:
            gain = fmt_gain(f)
            assert gain in f.expected_gain and gain in page
            if f in a.findings[:len(titles)]:
                assert f"{f.title} — {gain}" in text

    # stragglers: the same share in both
    for s in (a.skew.stragglers if a.skew else []):
        assert f"({fmt(s.value, 'pct')})" in text and fmt(s.value, "pct") in page


def _with_findings(a: Analysis) -> Analysis:
    a.findings = findings(a)
    return a


def test_synthetic_64_ranks():
    a = _with_findings(typed(busy(64)))
    assert len(a.ranks) == 64 and len(a.findings) >= 3 and a.pipeline
    assert_consistent(a)


@pytest.mark.real
def test_real_gpu_fixture():
    a = analyze_path(str(FIXTURES / "hta" / "sampled_pair"), jobs=1)
    assert a.trace_kind == "gpu" and views.comm_by_group(a)
    assert_consistent(a)


@pytest.mark.parametrize("which", ["terminal", "report"])
def test_a_mismatch_is_caught(monkeypatch, which):
    """Not vacuous: an output that rounded one communication row differently fails the check."""
    import tests.unit.reports.test_consistency as me

    a = _with_findings(typed(busy(8)))
    g = views.comm_by_group(a)[0]
    good, bad = fmt(g.time_ms_per_step, "ms", False), fmt(g.time_ms_per_step + 0.01, "ms", False)
    name = "render" if which == "terminal" else "render_html"
    real = getattr(me, name)
    monkeypatch.setattr(me, name, lambda x: real(x).replace(good, bad))
    with pytest.raises(AssertionError):
        assert_consistent(a)


@pytest.mark.slow
def test_cpu_run(tmp_path, llmdiag_run):
    out = tmp_path / "run"
    llmdiag_run(out, "dp2", "--profile-steps", "1,1,2")
    a = analyze_path(str(out), jobs=1)
    assert a.trace_kind == "cpu" and len(a.ranks) == 2
    assert_consistent(a)
