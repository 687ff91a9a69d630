"""The HTML report: renders for every kind of run, prints the summary's numbers exactly, stays fast at 512
ranks, and never lets a trace string become markup."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import typing
import time
from html.parser import HTMLParser

import orjson
import pytest
from markupsafe import escape

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.analysis import Aggregate, Analysis, Hints
from llmdiag.diagnose.model.codec import type_hints
from llmdiag.diagnose.model.format import UNITS, fmt, fmt_gain
from llmdiag.diagnose.rules import findings
from llmdiag.reports.context import pick_ranks
from llmdiag.reports.render import SORT_JS, _code, render_html, render_report
from tests.gen.summaries import EVIL, analysis, busy, summary, typed


class Page(HTMLParser):
    """Numbers tagged with data-k/data-u, every tag's attributes, scripts and visible text."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.nums, self.tags, self.scripts, self.text = [], [], [], []
        self._num = None
        self._script = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "span" and "data-u" in a:
            self._num = [a.get("data-k"), a["data-u"], a.get("data-s") == "1", ""]
        if tag == "script":
            self._script = ""

    def handle_endtag(self, tag):
        if tag == "span" and self._num is not None:
            self.nums.append(tuple(self._num))
            self._num = None
        if tag == "script" and self._script is not None:
            self.scripts.append(self._script)
            self._script = None

    def handle_data(self, data):
        if self._num is not None:
            self._num[3] += data
        if self._script is not None:
            self._script += data
        self.text.append(data)


def analysed(s: dict) -> Analysis:
    """As the analyzer hands it over: the typed analysis with its findings (the report's numbers point at them)."""
    a = typed(s)
    a.findings = findings(a)
    return a


def resolve(summary: dict, path: str):
    """The value at a dotted summary path (`ranks.3.step_time_ms`); list parts are indices, dict parts keys."""
    cur = summary
    for part in path.split("."):
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur


def nulled(cls, d: dict) -> dict:
    """`d` with None in every field of `cls` whose type admits None."""
    hints = type_hints(cls)
    return {k: None if type(None) in typing.get_args(hints.get(k)) else v for k, v in d.items()}


def check_numbers(a: Analysis, html: str) -> int:
    """Each tagged number equals fmt(summary value) and is within rounding of the raw value."""
    s = a.to_dict()
    page = Page(html)
    exact = [n for n in page.nums if n[0]]
    for key, unit, suffix, text in exact:
        v = resolve(s, key)
        assert text == fmt(v, unit, suffix), key
        if v is None or isinstance(v, bool):
            assert text == "n/a"
            continue
        scale, nd, suf = UNITS[unit]
        if suffix and suf:
            assert text.endswith(suf), key
            text = text[: -len(suf)]
        number = float(text.replace(",", ""))
        assert abs(number - v * scale) <= 0.5 * 10 ** -nd + 1e-9 * max(1.0, abs(v * scale)), key
    return len(exact)


VARIANTS = {
    "gpu8": {}, "pp8": {"pipeline": True}, "cpu8": {"gpu": False}, "bare": {"comm": False, "memory": False,
                                                                           "with_manifest": False},
    "cpu_pp": {"gpu": False, "pipeline": True}, "single": {"n": 1},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_renders_and_numbers_match(name, tmp_path):
    a = analysed(summary(**VARIANTS[name]))
    out = render_report(a, str(tmp_path / "sub" / "report.html"))
    html = open(out, encoding="utf-8").read()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert check_numbers(a, html) > 20
    for key in ("aggregate.step_time_ms", "ranks.0.step_time_ms", "ranks.0.exposed_comm_ms"):
        assert f'data-k="{key}"' in html
    if a.pipeline:
        for key in ("pipeline.measured", "pipeline.theory", "pipeline.stage_bubbles.0.measured",
                    "pipeline.predictions.0.bubble"):
            assert f'data-k="{key}"' in html
        assert "<svg" in html.split('id="pipeline"')[1].split("</section>")[0]


def test_busy_report_has_findings_and_headline(tmp_path):
    a = analysed(busy())
    html = render_html(a)
    assert check_numbers(a, html) > 20
    head = html.split('id="headline"')[1].split("</section>")[0]
    text = re.sub(r"<[^>]+>", "", head)
    order = sorted(a.findings, key=lambda f: (["high", "medium", "low"].index(f.severity), -(f.gain_ms or 0)))
    for f in order[:3]:
        assert f.title in text
    for f in order[3:]:
        assert f.title not in text
    assert order[0].severity == "high" and order[1].severity == "high"  # near-OOM has no gain but leads
    for f in a.findings:
        assert str(_code(f.evidence.text)) in html and str(escape(f.expected_gain)) in html
    listed = html.split('id="findings"')[1].split("</section>")[0]
    assert [listed.index(escape(f.title)) for f in a.findings] == sorted(listed.index(escape(f.title))
                                                                          for f in a.findings)  # the same order below
    for i, f in enumerate(a.findings[:3]):  # the gain as the share every output prints
        if f.gain_ms is not None:
            assert f'data-k="findings.{i}.gain_frac"' in head


def test_findings_shown_as_given_never_recomputed():
    """The report does not run the rules: an analysis without findings says none fired."""
    a = typed(busy())
    assert a.findings == []
    html = render_html(a)
    assert "Pipeline bubble larger than needed" not in html and "No rule fired" in html


def test_json_summary_renders_like_the_dict():
    a = analysed(busy())
    assert render_html(typed(orjson.loads(orjson.dumps(a.to_dict())))) == render_html(a)


def test_512_ranks_fast_and_bounded(tmp_path):
    a = analysed(busy(512))
    t = time.perf_counter()
    html = open(render_report(a, str(tmp_path / "r.html")), encoding="utf-8").read()
    elapsed = time.perf_counter() - t
    print(f"512-rank render: {elapsed:.2f} s, {len(html) / 1e6:.2f} MB")
    assert elapsed < 15, elapsed  # measured ~1.5 s on 2 cores
    assert len(html) < 3_000_000
    assert "No outlier: all 512 ranks" in html  # busy(512)'s ranks are alike: no list of 32 identical rows
    sect = html.split('id="breakdown"')[1].split("</section>")[0]
    assert sect.count("<tr") <= 6 + 3 + 4  # distribution + per-step + headers
    assert 'id="fig-heatmap"' in sect and sect.count("<rect") < 3 * 512  # runs of one colour merged (6 rows)
    assert check_numbers(a, html) > 100


def test_pick_ranks_takes_the_worst():
    s = summary(64)
    s["ranks"][40]["step_time_ms"] = 500.0
    s["ranks"][50]["exposed_comm_frac"] = 0.9
    s["ranks"][60]["idle_frac"] = 0.9
    idx, why = pick_ranks(typed(s).ranks, 8)
    assert idx == [40, 50, 60]  # the outliers, named; the 61 alike ranks are not listed as "worst"
    assert why[40][0].startswith("slow step 500.00 ms (median") and why[50][0].startswith("exposed comm 90.0%")
    assert pick_ranks(typed(summary(64)).ranks, 8) == ([], {})
    idx, _ = pick_ranks(typed(s).ranks, 2)
    assert idx == [40, 50]  # capped, largest deviation first (idle 0.9 and exposed 0.9 tie; rank order)


def test_none_everywhere(tmp_path):
    s = summary(comm=False, memory=False, with_manifest=False)
    s["aggregate"] = nulled(Aggregate, s["aggregate"])
    s["skew"] = None
    s["pipeline"] = None
    s["layout"] = None
    for r in s["ranks"]:
        r["overlap_ratio"] = None
        r["hints"] = nulled(Hints, r["hints"])
        r["top_kernels"] = []
    a = analysed(s)
    html = render_html(a)
    assert "n/a" in html and check_numbers(a, html) > 5
    empty = dataclasses.replace(analysis(2, with_manifest=False), world_size=None, layout=None, ranks=[],
                                ranks_missing=[0, 1], pipeline=None, skew=None, issues=[], llmdiag_version="")
    assert "No rank could be analysed" in render_html(empty)


def test_pipeline_without_actions_has_no_timeline():
    s = summary(pipeline=True)
    for r in s["ranks"]:
        r["pipeline_actions"] = []
    a = analysed(s)
    html = render_html(a)
    assert "No pipeline actions" in html and check_numbers(a, html) > 10


def test_no_injection():
    s = busy(evil=True)
    for r in s["ranks"]:
        r["comm_by_kind"][0]["pg"] = "mesh_dp " + EVIL[0] + EVIL[1] + EVIL[2]  # a dp group: reaches evidence
        r["warnings"] = [EVIL[0], EVIL[1]]
        r["coords"] = {"pp": r["coords"]["pp"], "x": EVIL[1]}
        r["memory"][0]["device"] = EVIL[0]
        r["memory"][0]["peak_op"] = EVIL[1]
    s["pipeline"]["explanation"] = EVIL[0] + EVIL[2]
    s["skew"]["stragglers"][0]["reason"] = EVIL[1]
    s["skew"]["last_arrivals"] = {EVIL[1]: 3}
    s["skew"]["host_shift_ms"] = {EVIL[0]: 1.0}
    s["manifest"]["command"] = EVIL
    with pytest.raises(LlmdiagError):  # a string where a rank number belongs is refused at the edge
        typed({**s, "ranks_missing": [EVIL[0]]})
    a = analysed(s)
    assert any(EVIL[0] in f.evidence.text for f in a.findings), "a pg name must reach a finding's evidence"
    html = render_html(a)
    page = Page(html)
    assert html.count("<script") == 1 and page.scripts == [SORT_JS]
    for tag, attrs in page.tags:
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)
        assert tag not in ("img", "iframe", "object", "embed", "link", "base", "form")
    unquoted = re.sub(r'"[^"]*"', '""', html)  # attribute values are escaped: drop them, look at the tags
    assert not re.search(r"<[a-zA-Z][^<>]*\sonerror\s*=", unquoted)
    text = "".join(page.text)
    assert "{{ 7*7 }}" in text and "<script>alert(1)</script>" in text  # shown as text, not evaluated
    assert "alert(1)" not in "".join(s for s in re.findall(r"<svg.*?</svg>", html, flags=re.S))
    # raw trace strings never reach the SVG figures
    for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        assert "onerror" not in svg and "7*7" not in svg


def test_self_contained_with_csp():
    html = render_html(analysed(busy()))
    digest = base64.b64encode(hashlib.sha256(SORT_JS.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in html
    page = Page(html)
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            v = attrs.get(name)
            assert v is None or v.startswith(("#", "data:")), (tag, name, v)
    assert "<link" not in html and "@import" not in html
    assert not re.search(r"url\((?!#)", html)  # only in-document references (SVG clip paths)


def test_ids_unique_and_references_resolve():
    """Three inline SVGs share one document: their ids must not collide (clip paths would cross figures)."""
    html = render_html(analysed(busy()))
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    refs = set(re.findall(r'url\(#([^)]+)\)', html)) | set(re.findall(r'href="#([^"]+)"', html))
    assert refs <= set(ids), refs - set(ids)


def _report_rows(html: str, section: str, table: int = 0) -> list[list[str]]:
    """Cell texts of the body rows of one table in one section of the report."""
    sec = html.split(f'id="{section}"')[1].split("</section>")[0]
    body = re.findall(r"<tbody>(.*?)</tbody>", sec, flags=re.S)[table]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)]


def _terminal_rows(text: str, title: str) -> list[list[str]]:
    lines = text.split("\n" + title)[1].split("\n\n")[0].splitlines()[3:]
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def test_terminal_and_report_print_the_same_numbers():
    """One view, one unit: a communication row, a kernel and a finding's gain read the same in both outputs."""
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.diagnose.model.views import comm_by_group, kernel_table

    a = analysed(busy())
    text, html = render(a), render_html(a)
    term = _terminal_rows(text, "Communication per collective and process group (per step")
    rep = _report_rows(html, "overlap")
    assert len(term) == len(rep) == len(comm_by_group(a)) >= 1
    for t, r in zip(term, rep, strict=True):
        # kind, role, ranks, ops/step, ms/step, exposed ms/step, overlap: the same texts, the unit included
        assert [t[0], *t[2:7]] == [r[0], *r[2:7]] and t[7] == r[7] and r[7].endswith("%")
    term = _terminal_rows(text, "Top kernels / ops over ranks (per step")
    rep = _report_rows(html, "kernels")
    assert len(term) == len(kernel_table(a, 10)) and len(rep) >= len(term)
    for t, r in zip(term, rep):
        assert t[1:6] == r[1:6] and t[6] == r[7] and r[7].endswith("%")  # kind, ranks, ms, count per step, mean µs; share
    head = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html.split('id="headline"')[1].split("</section>")[0]))
    for f in a.findings[:3]:
        if f.gain_ms is not None:
            gain = fmt_gain(f)
            assert gain in head and f"{f.title} — {gain}" in text
    assert [t.split("] ", 1)[1].split(" — ")[0] for t in re.findall(r"^  \[\w+\] .*$", text, flags=re.M)] == \
        [f.title for f in a.findings[:5]]  # the same order as the report's


def test_short_names_stay_distinct():
    from llmdiag.diagnose.model.names import short_names

    names = ["void k_a<float>(int*, int)", "void k_a<half>(int*, int)", "void g<1>(a)", "void g<1>(b)",
             "Memcpy DtoD (Device -> Device)", "x" * 200 + "1", "x" * 200 + "2",
             "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1>(Params)",
             "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>(Params)"]
    short = short_names(names, 40)
    assert len(set(short.values())) == len(names)
    assert short["void k_a<float>(int*, int)"] == "void k_a<float>(…)" and short["void g<1>(a)"] == "void g<1>(a)"
    assert short["Memcpy DtoD (Device -> Device)"] == "Memcpy DtoD (Device -> Device)"
    assert short["x" * 200 + "1"].endswith("x1") and "…" in short["x" * 200 + "1"]
    assert all(len(v) <= 40 for k, v in short.items() if not k.startswith("x"))


# ---- units chosen from the data (issue 15 item 1) ------------------------------------------------------------
def test_units_follow_the_value_and_never_round_a_value_to_zero():
    from llmdiag.diagnose.model.format import column_unit

    assert fmt(5 * 2**20, "gib") == "5.00 MiB" and fmt(23.5 * 2**30, "gib") == "23.50 GiB"
    assert fmt(0.00147, "tflops") == "1.5 GFLOP/s" and fmt(0.5, "gbps") == "500.0 MB/s"
    assert fmt(None, "gib") == "n/a" and fmt(float("nan"), "gbps") == "n/a"
    assert column_unit([5 * 2**20, 3 * 2**30], "gib") == "gib" and column_unit([5 * 2**20], "gib") == "mib"
    assert column_unit([0.05, 0.02], "ms") == "ms_us" and fmt(0.05, "ms_us") == "50.0 µs"
    assert column_unit([None], "gbps") == "gbps"  # nothing defined: the header keeps its unit


def test_small_memory_prints_in_mib_on_card_table_and_axis():
    """A CPU run's 5 MiB peaks under a 23.5 GiB capacity: the card, the table and the figure's axis say MiB,
    the axis is fitted to the curves and the capacity becomes a label."""
    a = analysis(2)
    for r in a.ranks:
        for m in r.memory:
            m.peak_allocated, m.peak_reserved, m.capacity = 5 * 2**20, 6 * 2**20, int(23.5 * 2**30)
            m.timeline = [[0.0, 1 * 2**20, 2 * 2**20], [5.0, 5 * 2**20, 6 * 2**20]]
    a.aggregate.memory_peak_max = 5 * 2**20
    a.aggregate.achieved_tflops_per_device = 0.00147
    html = render_html(a)
    assert "5.00 MiB" in html and "1.5 GFLOP/s" in html and "0.0 TFLOP/s" not in html
    assert "peak allocated MiB" in html and "capacity GiB" in html
    svg = html[html.index('id="fig-memory"'):]
    svg = svg[:svg.index("</svg>")]
    assert "MiB (solid allocated" in svg and "off scale" in svg and "23.50 GiB" in svg


def test_the_report_records_how_it_was_made(tmp_path):
    """Command with the options given, the options that change numbers, input files with sizes, version,
    time; a report made with --exclude-last-step says so in its header."""
    from click.testing import CliRunner

    from llmdiag.diagnose.cli.main import main
    from tests.gen.builder import gpu_rank

    d = tmp_path / "run"
    for r in range(2):
        gpu_rank(r, steps=3).write(d / f"rank{r}.json")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["analyze", str(d), "-q", "--exclude-last-step", "--report", str(out),
                                    "--json", str(tmp_path / "s.json")])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    pv = s["provenance"]
    assert pv["command"][:3] == ["llmdiag", "analyze", str(d)] and "--exclude-last-step" in pv["command"]
    assert pv["options"]["exclude_last_step"] is True and "comm_regex" not in pv["options"]
    assert sorted(f["bytes"] for f in pv["inputs"]) == sorted((d / f"rank{r}.json").stat().st_size for r in range(2))
    assert pv["version"] and pv["created_at"].endswith("+00:00")
    assert "last step excluded" in page and "How this report was made" in page
    assert str(escape(" ".join(pv["command"]))) in page and str(d / "rank0.json") in page
    assert Analysis.from_dict(s).provenance.inputs[0].bytes == pv["inputs"][0]["bytes"]


def test_cpp_names_are_demangled_in_the_tables_but_kept_in_the_json():
    """`_ZN…` kernel names read as C++ (the maintained cpp_demangle library), in the report and the terminal;
    the summary keeps the name the trace wrote, and a name that is not a valid mangling stays as written."""
    pytest.importorskip("cpp_demangle")
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.diagnose.model.names import demangle

    mangled = "_ZN7cutlass6KernelINS_4gemm6kernel4GemmIfEEEEvNT_6ParamsE"
    assert demangle(mangled).startswith("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<float>")
    assert demangle("_Znot a mangling") == "_Znot a mangling" and demangle("aten::mm") == "aten::mm"
    a = analysis(2)
    for r in a.ranks:
        r.top_kernels[0].name = mangled
    html, text = render_html(a), render(a)
    assert "cutlass::Kernel&lt;cutlass::gemm::kernel::Gemm" in html or "cutlass::Kernel<cutlass::gemm::kernel::Gemm" in html
    assert "cutlass::Kernel<" in text and mangled not in text
    assert a.to_dict()["ranks"][0]["top_kernels"][0]["name"] == mangled


def test_the_report_does_not_import_matplotlib():
    """Importing matplotlib cost ~1 s, more than analysing a 35 MB trace (benchmarks/render_cost.py): the
    report's figures are plain SVG, and matplotlib is loaded only for a figure that still needs it (MoE)."""
    import subprocess
    import sys

    code = ("import sys; from llmdiag.reports.render import render_html; from tests.gen.summaries import busy, typed; "
            "from llmdiag.diagnose.rules import findings; a = typed(busy(8)); a.findings = findings(a); h = render_html(a); "
            "assert 'id=\"fig-pipeline\"' in h and 'id=\"fig-memory\"' in h and 'id=\"fig-breakdown\"' in h; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_gantt_legend_and_replicas_say_what_is_drawn():
    """Under 1F1B the legend has no weight-grad (W) entry; TP peers of a stage are not called replicas."""
    a = analysed(busy(8))
    html = render_html(a)
    svg = html[html.index('id="fig-pipeline"'):]
    svg = svg[:svg.index("</svg>")]
    assert "forward" in svg and "weight grad" not in svg and "idle = bubble" in svg
    head = html[html.index("Timeline of one step"):][:400]
    assert "one of 2 data-parallel replicas" in head and "runs on 2 tensor/context-parallel peers" in head


def test_many_steps_chart_and_heatmap_grouped_by_host():
    """40 steps: one chart bar per step, its mean parts summing to the mean step time of the ranks, and the
    40-row table folded; the heatmap orders ranks by mesh coordinate (bands: the outermost coordinate, else
    runs of one host) and its cells carry the values."""
    import dataclasses as dc

    from llmdiag.reports.charts import rank_order, step_series
    from tests.gen.summaries import _steps

    a = analysis(8)
    for r in a.ranks:
        r.steps = _steps(40, 3.0, {"compute_only": 80.0, "overlapped": 12.0, "exposed": 2.0 + r.rank,
                                   "other": 1.0, "idle": 5.0})
        r.host = f"node{1 - r.rank % 2}"  # odd ranks on node0, even on node1
    a.ranks[3].steps[7] = dc.replace(a.ranks[3].steps[7], time_ms=500.0)
    series = step_series(a)
    assert [s["step"] for s in series] == list(range(10, 50))
    s17 = series[7]
    assert s17["max"] == 500.0 and s17["min"] == pytest.approx(100.0)
    assert sum(v for _, _, v in series[0]["parts"]) == pytest.approx(statistics_mean([r.steps[0].time_ms
                                                                                      for r in a.ranks]))
    html = render_html(a)
    svg = html[html.index('id="fig-steps"'):].split("</svg>")[0]
    assert svg.count('<g id="step-bar-') == 40 and "step 17: mean" in svg
    assert "<details><summary>Per-step table (40 steps)</summary>" in html
    ranks, groups = rank_order(a)  # coordinates dp = rank: mesh order is rank order; no dp group holds 2 ranks
    assert [r.rank for r in ranks] == list(range(8))
    assert [g[0] for g in groups] == ["node1", "node0"] * 4  # so the bands are runs of one host
    for r in a.ranks:
        r.coords = {"pp": r.rank % 2, "dp": r.rank // 2}  # even ranks are stage 0
    a.manifest.mesh_dim_names = ["pp", "dp"]  # the manifest's mesh order: pp outermost
    ranks, groups = rank_order(a)
    assert [r.rank for r in ranks] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert [(g[0], g[1], g[2]) for g in groups] == [("pp 0", 0, 3), ("pp 1", 4, 7)]
    heat = html[html.index('id="fig-heatmap"'):].split("</svg>")[0]
    assert "exposed comm, rank 7: " in heat or "exposed comm, ranks" in heat


def statistics_mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.real
def test_link_peak_of_a_foreign_trace_comes_from_its_device(tmp_path):
    """No manifest: the device is the trace's own deviceProperties name, so the bandwidth table's '% of link peak'
    and its note use the A100's table entry (busbw 6.6 GB/s of 240 GB/s), as the low_busbw finding does."""
    from pathlib import Path

    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.model import views
    from llmdiag.reports.render import render_html

    real = Path(__file__).resolve().parents[3].parent / "shared/fixtures/real/hta/nccl_data.json.gz"
    a = analyze_path(str(real), jobs=1)
    assert "A100" in views.device_name(a)
    ar = next(g for g in views.comm_by_group(a) if g.kind == "allreduce")
    assert ar.of_link_peak == pytest.approx(ar.busbw_gbps / 240.0)
    html = render_html(a)
    assert "Link peak: 240.0 GB/s achievable bus bandwidth of NVIDIA A100" in html


def test_step_parts_one_name_and_colour_in_both_figures():
    """The breakdown bars and the per-step chart read one registry (model/fields.py): each part's legend
    shows the same words in the same colour in both, idle included."""
    import re

    from llmdiag.diagnose.model.fields import STEP_PARTS
    from tests.gen.summaries import _steps

    a = analysis(2)
    for r in a.ranks:
        r.steps = _steps(4, 3.0, {"compute_only": 80.0, "overlapped": 12.0, "exposed": 2.0, "other": 1.0,
                                  "idle": 5.0})
    html = render_html(a)
    for fig in ('id="fig-breakdown"', 'id="fig-steps"'):
        svg = html[html.index(fig):].split("</svg>")[0]
        legend = re.findall(r'fill="(#[0-9a-f]{6})"[^>]*/><text[^>]*>([^<]+)</text>', svg)
        assert [(label, colour) for colour, label in legend[:len(STEP_PARTS)]] == [
            (p.label, p.colour) for p in STEP_PARTS], fig
