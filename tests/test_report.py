"""The HTML report: renders for every kind of run, prints the summary's numbers exactly, stays fast at 512
ranks, and never lets a trace string become markup."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from html.parser import HTMLParser

import orjson
import pytest
from markupsafe import escape

from diagnose.rules import UNITS, findings, fmt
from reports.context import pick_ranks, resolve
from reports.render import SORT_JS, _code, render_html, render_report
from tests.summaries import EVIL, busy, summary


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


def analysed(s: dict) -> dict:
    """As the analyzer stores it: findings computed into the summary (the report's numbers point at them)."""
    s["findings"] = findings(s)
    return s


def check_numbers(s: dict, html: str) -> int:
    """Each tagged number equals fmt(summary value) and is within rounding of the raw value."""
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
    s = analysed(summary(**VARIANTS[name]))
    out = render_report(s, str(tmp_path / "sub" / "report.html"))
    html = open(out, encoding="utf-8").read()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert check_numbers(s, html) > 20
    for key in ("aggregate.step_time_ms", "ranks.0.step_time_ms", "ranks.0.exposed_comm_ms"):
        assert f'data-k="{key}"' in html
    if s["pipeline"]:
        for key in ("pipeline.measured", "pipeline.theory", "pipeline.stage_bubbles.0.measured",
                    "pipeline.predictions.0.bubble"):
            assert f'data-k="{key}"' in html
        assert "<svg" in html.split('id="pipeline"')[1].split("</section>")[0]


def test_busy_report_has_findings_and_headline(tmp_path):
    s = busy()
    s["findings"] = findings(s)
    html = render_html(s)
    assert check_numbers(s, html) > 20
    head = html.split('id="headline"')[1].split("</section>")[0]
    text = re.sub(r"<[^>]+>", "", head)
    order = sorted(s["findings"], key=lambda f: (["high", "medium", "low"].index(f["severity"]), -(f["gain_ms"] or 0)))
    for f in order[:3]:
        assert f["title"] in text
    for f in order[3:]:
        assert f["title"] not in text
    assert order[0]["severity"] == "high" and order[1]["severity"] == "high"  # near-OOM has no gain but leads
    for f in s["findings"]:
        assert str(_code(f["evidence"])) in html and str(escape(f["expected_gain"])) in html


def test_findings_computed_when_summary_has_none():
    s = busy()
    s.pop("findings")
    assert "Pipeline bubble larger than needed" in render_html(s)


def test_json_summary_renders_like_the_dict():
    s = busy()
    assert render_html(orjson.loads(orjson.dumps(s))) == render_html(s)


def test_512_ranks_fast_and_bounded(tmp_path):
    s = analysed(busy(512))
    t = time.perf_counter()
    html = open(render_report(s, str(tmp_path / "r.html")), encoding="utf-8").read()
    elapsed = time.perf_counter() - t
    print(f"512-rank render: {elapsed:.2f} s, {len(html) / 1e6:.2f} MB")
    assert elapsed < 15, elapsed  # measured ~1.5 s on 2 cores
    assert len(html) < 3_000_000
    assert "480 ranks omitted" in html
    rows = html.split('id="breakdown"')[1].split("</section>")[0].count("<tr>")
    assert rows <= 32 + 6 + 3 + 4  # shown ranks + distribution + per-step + headers
    assert check_numbers(s, html) > 100


def test_pick_ranks_takes_the_worst():
    s = summary(64)
    s["ranks"][40]["step_time_ms"] = 500.0
    s["ranks"][50]["exposed_comm_frac"] = 0.9
    s["ranks"][60]["idle_frac"] = 0.9
    idx, why = pick_ranks(s["ranks"], 8)
    assert len(idx) == 8 and {40, 50, 60} <= set(idx)
    assert "slowest step" in why[40] and idx == sorted(idx)


def test_none_everywhere(tmp_path):
    s = summary(comm=False, memory=False, with_manifest=False)
    s["aggregate"] = {k: None for k in s["aggregate"]}
    s["skew"] = None
    s["pipeline"] = None
    s["layout"] = None
    for r in s["ranks"]:
        r["overlap_ratio"] = None
        r["hints"] = {k: None for k in r["hints"]}
        r["top_kernels"] = []
    html = render_html(analysed(s))
    assert "n/a" in html and check_numbers(s, html) > 5
    empty = {"source": "x", "name": "x", "trace_kind": "gpu", "world_size": None, "layout": None, "manifest": None,
             "ranks": [], "ranks_missing": [0, 1], "aggregate": {}, "pipeline": None, "skew": None, "issues": [],
             "options": {}, "findings": [], "schema_version": 1, "llmdiag_version": ""}
    assert "No rank could be analysed" in render_html(empty)


def test_pipeline_without_actions_has_no_timeline():
    s = summary(pipeline=True)
    for r in s["ranks"]:
        r["pipeline_actions"] = []
    html = render_html(analysed(s))
    assert "No pipeline actions" in html and check_numbers(s, html) > 10


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
    s["ranks_missing"] = [EVIL[0]]
    s["findings"] = findings(s)
    assert any(EVIL[0] in f["evidence"] for f in s["findings"]), "a pg name must reach a finding's evidence"
    html = render_html(s)
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
    html = render_html(busy())
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
