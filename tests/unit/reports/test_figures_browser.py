"""Every figure of every report, measured in headless Chromium at 800 and 1400 px: no text box overlaps
another in the same figure, none lies outside its SVG's visible box (clipped), and no table cell with
words is squeezed to a few characters. The boxes are measured in the page (getBoundingClientRect of every
<text> and every table cell), not read off a screenshot.

Reports: generated analyses that together draw every figure (step breakdown, per-step chart, rank heatmap
plain and binned, pipeline timeline, memory, MoE send heatmap, what-if tables), the `diff` page, and real
traces under `real`. Skipped where Chromium is absent (`make browser` installs it where it can).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.reports.test_report_browser import CHROMIUM, run_probe
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs headless chromium (`make browser`)")]
REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
WIDTHS = (800, 1400)

PROBE = r"""<pre id="probe"></pre><script>
(function(){
function box(e){var r=e.getBoundingClientRect();return {x0:r.left,y0:r.top,x1:r.right,y1:r.bottom,w:r.width,h:r.height};}
var out={figs:[],cells:[]};
document.querySelectorAll('svg').forEach(function(svg,k){
  var s=box(svg);if(s.w===0||s.h===0)return;
  var texts=[];svg.querySelectorAll('text').forEach(function(t){var b=box(t);
    if(t.textContent.trim()&&b.w>0)texts.push({t:t.textContent.trim().slice(0,60),b:b});});
  var over=[],clip=[];
  for(var i=0;i<texts.length;i++){var a=texts[i].b;
    if(a.x0<s.x0-1||a.x1>s.x1+1||a.y0<s.y0-1||a.y1>s.y1+1)clip.push(texts[i].t);
    for(var j=i+1;j<texts.length;j++){var b=texts[j].b;
      var ix=Math.min(a.x1,b.x1)-Math.max(a.x0,b.x0),iy=Math.min(a.y1,b.y1)-Math.max(a.y0,b.y0);
      if(ix>1&&iy>2)over.push([texts[i].t,texts[j].t]);}}
  out.figs.push({id:svg.id||svg.getAttribute('class')||String(k),texts:texts.length,over:over.slice(0,6),
                 nover:over.length,clip:clip.slice(0,6),nclip:clip.length,w:Math.round(s.w),h:Math.round(s.h)});
});
document.querySelectorAll('td,th').forEach(function(c){var t=c.textContent.trim();var b=box(c);
  if(t.length>12&&/[A-Za-z0-9]{3}/.test(t)&&b.w>0&&b.w<100)out.cells.push({t:t.slice(0,60),w:Math.round(b.w)});});
out.page=document.documentElement.scrollWidth;out.view=window.innerWidth;
document.getElementById('probe').textContent=JSON.stringify(out);})();
</script>"""


def measure(tmp_path, html: str, width: int) -> dict:
    """The probe's facts for `html` at `width` px (test_report_browser.run_probe)."""
    return run_probe(tmp_path, html, width, PROBE)


def problems(p: dict) -> list:
    bad = [(f["id"], "overlap", f["nover"], f["over"]) for f in p["figs"] if f["nover"]]
    bad += [(f["id"], "clipped", f["nclip"], f["clip"]) for f in p["figs"] if f["nclip"]]
    bad += [("table", "narrow cells", p["cells"][:6])] if p["cells"] else []
    bad += [("page", "wider than the window", p["page"], p["view"])] if p["page"] > p["view"] else []
    return bad


def check(tmp_path, html: str, figures: set[str]) -> None:
    for width in WIDTHS:
        p = measure(tmp_path, html, width)
        ids = {f["id"] for f in p["figs"]}
        assert figures <= ids, (width, figures - ids)
        assert problems(p) == [], (width, problems(p))


# -- the harness sees what it must ------------------------------------------------------------------------------
def test_the_probe_sees_overlap_clipping_and_narrow_cells(tmp_path):
    page = ('<!DOCTYPE html><html><body><svg id="bad" viewBox="0 0 200 40" width="200" height="40">'
            '<text x="10" y="20">overlapping label</text><text x="30" y="22">another label</text>'
            '<text x="170" y="30">clipped on the right</text></svg>'
            '<table style="width:300px"><tr><td style="white-space:nowrap">' + "x" * 80 + '</td>'
            '<td>a note squeezed to nothing</td></tr></table></body></html>')
    p = measure(tmp_path, page, 800)
    fig = next(f for f in p["figs"] if f["id"] == "bad")
    assert fig["nover"] >= 1 and "clipped on the right" in fig["clip"]
    assert any(c["t"].startswith("a note") for c in p["cells"])


# -- the reports ------------------------------------------------------------------------------------------------
def _report(a) -> str:
    from llmdiag.diagnose.rules import findings
    from llmdiag.reports.render import render_html

    a.findings = findings(a)
    return render_html(a)


@pytest.mark.parametrize("n", [8, 256, 1100])
def test_generated_report_figures(tmp_path, n):
    """Breakdown, per-step chart, pipeline, memory and the rank heatmap (binned past 512 ranks)."""
    from tests.gen.summaries import busy, typed

    figs = {"fig-heatmap", "fig-pipeline", "fig-memory", "fig-steps"} | ({"fig-breakdown"} if n <= 8 else set())
    check(tmp_path, _report(typed(busy(n=n))), figs)


def test_evil_strings_report_figures(tmp_path):
    from tests.gen.summaries import busy, typed

    check(tmp_path, _report(typed(busy(n=8, evil=True))), {"fig-heatmap"})


@pytest.mark.parametrize("n", [2, 4, 24, 80])
def test_moe_report_figures(tmp_path, n):
    from llmdiag.diagnose.analyze import analyze_path
    from tests.gen.moe import moe_ep_ranks

    send = [[64 * (1 + (s + d) % 3) for d in range(n)] for s in range(n)]
    traces, _ = moe_ep_ranks(send, steps=2, layers=2)
    for r, b in enumerate(traces):
        b.write(tmp_path / f"rank{r}.pt.trace.json.gz")
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.moe is not None and a.moe.send_matrix
    check(tmp_path, _report(a), {"fig-moe-send"})


def test_whatif_and_pipeline_report(tmp_path, monkeypatch):
    """A planted slow pipeline stage: the what-if section (cards, stages, groups) and the pipeline timeline."""
    from llmdiag.diagnose.analyze import analyze_path
    from tests.gen.pipeline import write
    from tests.gen.planted import corpus

    d = tmp_path / "traces"
    d.mkdir()
    write(corpus()[8], d)
    a = analyze_path(str(d), jobs=1)
    assert a.whatif is not None
    from llmdiag.diagnose.model import whatif_view  # reports/context.py imports it when a what-if is shown

    cards = whatif_view.whatif_cards  # the demo's longer contributors line (four groups, long op types)
    long = ("top contributors", "stage 2 1.027, op type backward-compute-input 1.021, DP rank 0 1.019, stage 3 1.010",
            "S recomputed with only that group at its measured durations")
    monkeypatch.setattr(whatif_view, "whatif_cards", lambda w, *plant: cards(w, *plant) + [long])
    html = _report(a)
    assert "backward-compute-input 1.021" in html
    assert 'id="whatif"' in html
    check(tmp_path, html, {"fig-pipeline"})


def test_diff_page_chart(tmp_path):
    from llmdiag.diagnose.gate.diff import compare
    from llmdiag.reports.diff_render import render_diff_html
    from tests.unit.gate.test_gate import make_analysis

    a = make_analysis(n=4, kernels={"aten::mm": 40.0, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": 20.0})
    b = make_analysis(n=4, overlap=0.3, ranks={1: {"step": 180.0}, 2: {"exposed": 0.01}},
                      kernels={"aten::mm": 20.0, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": 45.0})
    html = render_diff_html(compare(a, b))
    assert 'id="fig-diff"' in html
    check(tmp_path, html, {"fig-diff"})


@pytest.mark.parametrize("workload,args", [("dp2tp2pp2", []), ("ep2", ["--moe-experts", "4", "--moe-topk", "2"])])
def test_own_run_report_figures(tmp_path, llmdiag_run, workload, args):
    """The report of `llmdiag run`'s own traces (what `make demo` shows): pipeline, what-if, MoE, memory."""
    from llmdiag.diagnose.analyze import analyze_path

    out = tmp_path / "run"
    llmdiag_run(out, workload, "--profile-steps", "0,1,1", "--steps", "3", *args)
    a = analyze_path(str(out), jobs=1)
    check(tmp_path, _report(a), {"fig-heatmap", "fig-memory"} | ({"fig-moe-send"} if a.moe else {"fig-pipeline"}))


REAL_SETS = ["hta/nccl_data.json.gz", "hta/sampled_pair", "tracelens/mi300_ddp8_actckpt_rank0.json.gz",
             "torchrec/sst_long_a2a_optimizer_3", "bytedance/trace-ST.parquet"]


@pytest.mark.real
@pytest.mark.parametrize("name", REAL_SETS)
def test_real_fixture_reports(tmp_path, name):
    """Reports of real trace sets: one GPU rank, a sampled pair, ROCm, four-rank DLRM, and the OSDI'25 Megatron
    op table (what-if section, eight workers)."""
    from llmdiag.diagnose.analyze import analyze_path

    a = analyze_path(str(REAL / name), jobs=1)
    check(tmp_path, _report(a), {"fig-heatmap"} if len(a.ranks) > 1 else set())


@pytest.mark.real
def test_real_diff_page(tmp_path):
    """`diff` of HTA's trace_diff pair: one rank of an 8-rank job before and after a change."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.gate.diff import compare
    from llmdiag.reports.diff_render import render_diff_html

    a, b = (analyze_path(str(REAL / "hta" / "trace_diff" / f), jobs=1) for f in ("control.json.gz", "test.json.gz"))
    check(tmp_path, render_diff_html(compare(a, b)), {"fig-diff"})
