"""The report's numbers read with their unit, its navigation reaches every section, its issues lead with the
message: checked on the HTML itself (the browser test measures the same page's layout)."""

from __future__ import annotations

import re

from llmdiag.diagnose.rules import findings
from llmdiag.reports.render import render_html
from tests.gen.summaries import analysis, busy, typed
from tests.unit.reports.test_report import Page


SIGNED = re.compile(r"(%|×| ms| µs| s| [KMG]iB| B| [GM]B/s| [TGM]FLOP/s| tok/s)$")  # a cell with its own unit


def _html(a) -> str:
    a.findings = findings(a)
    return render_html(a)


def test_every_share_and_factor_carries_its_sign():
    for a in (typed(busy(8)), analysis(8, pipeline=True)):
        page = Page(_html(a))
        shares = [n for n in page.nums if n[1] in ("pct", "x")]
        assert shares, "no share printed"
        bare = [n for n in shares if n[3].strip() != "n/a" and not n[3].strip().endswith(("%", "×"))]
        assert bare == [], bare[:5]


def test_every_header_of_a_number_column_says_its_unit_or_the_cells_do():
    """A right-aligned (number) header names a unit (ms, µs, GB/s, ...), a count ('ranks', 'events', 'per
    step'), or heads cells that each carry their own ('%', '×', '9.80 ms')."""
    html = _html(typed(busy(8)))
    units = re.compile(r"\b(ms|µs|s|GiB|MiB|KiB|B|GB/s|MB/s|TFLOP/s|GFLOP/s|FLOP/B|tokens|tok/s)\b|/step|×|%")
    counts = {"ranks", "count", "count per step", "ops/step", "matched", "steps", "events", "calls", "queue max",
              "launches/step", "group size", "microbatches", "rank"}
    for table in re.findall(r"<table.*?</table>", html, flags=re.S):
        heads = [re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r'<th class="r">(.*?)</th>', table)]
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("</thead>")[-1], flags=re.S)
        for j, h in enumerate(heads):
            if units.search(h) or h in counts:
                continue
            cells = [re.sub(r"<[^>]+>", "", c).strip() for r in rows for c in re.findall(r'<td class="r">(.*?)</td>', r)[j:j + 1]]
            assert cells and all(c == "n/a" or SIGNED.search(c) for c in cells), (h, cells[:3])


def test_the_nav_reaches_every_section_and_issues_lead_with_the_message():
    html = _html(typed(busy(8)))
    nav = set(re.findall(r'href="#([^"]+)"', html.split("<nav>")[1].split("</nav>")[0]))
    ids = set(re.findall(r'<section id="([^"]+)"', html)) | set(re.findall(r'<h2 id="([^"]+)"', html))
    assert ids - nav <= {"kernel-views"}, ids - nav  # kernel-views: a box for ops, seqs, roofline, streams, launch
    issues = html.split('<table class="issues">')[1]
    assert re.findall(r"<th>(.*?)</th>", issues)[:4] == ["message", "severity", "rank", "file"]
