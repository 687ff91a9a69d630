"""The report at 800 and 1400 px, measured in headless Chromium: no table cut (a table wider than its section scrolls
inside its own box, its first column sticky; no cell clips its text), every figure label at least 10 px tall as
painted, the navigation reaching every section, the issues table leading with the message.

Measured in the page (computed styles, getScreenCTM, scroll widths), not read off a screenshot. Skipped where
Chromium is absent (`make browser` installs it where it can).
"""

from __future__ import annotations

import os

import pytest

from llmdiag.diagnose.rules import findings
from llmdiag.reports.render import render_html
from tests.conftest import REAL
from tests.gen.summaries import analysis, busy, typed
from tests.unit.reports.test_report_browser import CHROMIUM, run_probe

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs headless chromium (`make browser`)")]
MIN_PX = 10.0

PROBE = r"""<pre id="probe"></pre><script>
(function(){var out={small:[],cut:[],clipped:[],unstuck:[],nav:[],sections:[]};
document.querySelectorAll('svg text').forEach(function(t){var m=t.getScreenCTM();if(!m||!t.textContent.trim())return;
  var r=t.getBoundingClientRect();if(r.width===0)return;
  var px=parseFloat(getComputedStyle(t).fontSize)*Math.sqrt(m.a*m.a+m.b*m.b);
  if(px<%(min)s)out.small.push([t.textContent.trim().slice(0,30),Math.round(px*10)/10]);});
document.querySelectorAll('td,th').forEach(function(c){var s=getComputedStyle(c);
  if(c.scrollWidth>c.clientWidth+1&&s.overflowX!=='visible')out.cut.push(c.textContent.trim().slice(0,40));});
document.querySelectorAll('table').forEach(function(t){var p=t.parentElement,ps=getComputedStyle(p);
  var scrolls=ps.overflowX==='auto'||ps.overflowX==='scroll';
  var sec=t.closest('section'),sr=sec?sec.getBoundingClientRect():null,tr=t.getBoundingClientRect();
  if(!scrolls&&sr&&tr.right>sr.right+1)out.clipped.push(t.id||(t.rows[0]&&t.rows[0].textContent.slice(0,40)));
  if(scrolls&&p.scrollWidth>p.clientWidth+1){var c=t.rows[1]&&t.rows[1].cells[0];
    if(c&&getComputedStyle(c).position!=='sticky')out.unstuck.push(t.rows[0].textContent.slice(0,40));}});
document.querySelectorAll('nav a').forEach(function(a){out.nav.push(a.getAttribute('href').slice(1));});
document.querySelectorAll('main section[id], main h2[id]').forEach(function(s){out.sections.push(s.id);});
var iss=document.querySelector('table.issues th');out.issues_first=iss?iss.textContent:null;
out.page=document.documentElement.scrollWidth;out.view=window.innerWidth;
document.getElementById('probe').textContent=JSON.stringify(out);})();
</script>""".replace("%(min)s", str(MIN_PX))
# sections the navigation may leave out: the headline is the page's top, a section inside another is reached
# through it (kernel-views holds ops, seqs, roofline, streams and launch, which the nav names one by one)
UNLISTED = {"kernel-views"}


def measure(tmp_path, html: str, width: int) -> dict:
    return run_probe(tmp_path, html, width, PROBE)


def layout_problems(p: dict) -> dict:
    bad = {"small text": p["small"][:5], "cut cells": p["cut"][:5], "tables cut off": p["clipped"][:5],
           "scrolling without a sticky first column": p["unstuck"][:5],
           "sections the nav misses": sorted(set(p["sections"]) - set(p["nav"]) - UNLISTED),
           "page wider than the window": p["page"] > p["view"]}
    return {k: v for k, v in bad.items() if v}


def test_the_probe_sees_small_text_cut_cells_and_a_table_cut_off(tmp_path):
    """Not vacuous: each fault it looks for, planted, is reported."""
    page = ('<!DOCTYPE html><html><body><main><section id="a"><svg viewBox="0 0 1000 100" style="width:500px">'
            '<text x="10" y="50" font-size="12">six px</text></svg>'
            '<table><tr><td style="max-width:50px;overflow:hidden;white-space:nowrap">' + "x" * 60 + '</td></tr></table>'
            '<div style="overflow:hidden;width:300px"><table style="width:900px"><tr><td>wide</td></tr></table></div>'
            '</section></main></body></html>')
    p = measure(tmp_path, page, 800)
    assert p["small"] and p["small"][0][1] == pytest.approx(6.0, abs=0.2)
    assert p["cut"] and p["clipped"] and "a" in layout_problems(p)["sections the nav misses"]


def _check(tmp_path, html: str) -> None:
    for width in (800, 1400):
        p = measure(tmp_path, html, width)
        assert layout_problems(p) == {}, (width, layout_problems(p))
        if p["issues_first"] is not None:
            assert p["issues_first"].strip() == "message", p["issues_first"]


@pytest.mark.parametrize("build", [lambda: typed(busy(8)), lambda: typed(busy(256)),
                                   lambda: analysis(8, pipeline=True), lambda: analysis(8, evil=True)])
def test_generated_reports_at_800_and_1400_px(tmp_path, build):
    a = build()
    a.findings = findings(a)
    _check(tmp_path, render_html(a))


@pytest.mark.real
@pytest.mark.parametrize("name", ["hta/nccl_data.json.gz", "torchrec/sst_sleep_pl_dense_after_backward_2",
                                  "hta/trace_diff/control.json.gz", "bytedance"])
def test_real_reports_at_800_and_1400_px(tmp_path, name):
    """Real traces: long cuDNN/CUTLASS names in the kernel, op → kernel and roofline tables, four ranks with
    issues on 150-character paths, the Megatron op table's what-if section."""
    from llmdiag.diagnose.analyze import analyze_path

    _check(tmp_path, render_html(analyze_path(os.path.join(REAL, name), jobs=1)))
