"""The report in a real browser: headless Chromium loads it offline, logs nothing on the console (no script
error, no Content-Security-Policy violation), runs the one allowed script, and paints a non-blank page.

Skipped where Chromium is absent (`make browser` installs it where it can).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from llmdiag.diagnose.rules import findings
from llmdiag.reports.render import render_report
from tests.gen.summaries import busy, typed

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs headless chromium (`make browser`)")]


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    """Chromium logs page console messages (errors, CSP violations) as `INFO:CONSOLE` lines."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def report(tmp_path, **kw) -> str:
    a = typed(busy(**kw))
    a.findings = findings(a)
    return render_report(a, str(tmp_path / "report.html"))


def test_harness_sees_console_errors(tmp_path):
    """Guard against a silent pass: a page with a script error must show up in the log we check."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><script>undefinedFn()</script></body></html>")
    r = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert any("undefinedFn" in line for line in console_lines(r.stderr)), r.stderr[-2000:]


@pytest.mark.parametrize("evil", [False, True])
def test_dom_renders_without_console_errors(tmp_path, evil):
    path = report(tmp_path, evil=evil)
    r = chromium(tmp_path, "--dump-dom", f"file://{path}")
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "Findings and recommendations" in dom and "<svg" in dom
    assert 'data-sortable="on"' in dom, "the sorting script was blocked or failed"
    assert console_lines(r.stderr) == [], console_lines(r.stderr)
    assert "<img" not in dom and "onerror=" not in dom.replace("onerror=alert(1)&gt;", "")


def test_screenshot_is_painted(tmp_path):
    path = report(tmp_path, n=512)
    png = tmp_path / "report.png"
    r = chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,3000", f"file://{path}")
    assert r.returncode == 0 and png.exists() and png.stat().st_size > 20_000, r.stderr[-2000:]
    assert console_lines(r.stderr) == []
    from PIL import Image  # a dev dependency: the check runs wherever the browser does

    with Image.open(png) as im:
        colours = im.convert("L").resize((70, 150)).getextrema()
    assert colours[1] - colours[0] > 100  # text and charts, not a blank page


PROBE = """<pre id="probe"></pre><script>
(function(){var d=document.documentElement,out={};
out.page=d.scrollWidth;out.view=window.innerWidth;
var bad=[];document.querySelectorAll('a[href^="#"]').forEach(function(a){var id=a.getAttribute('href').slice(1);
if(id&&!document.getElementById(id))bad.push(id);});out.broken=bad;
out.evidence=document.querySelectorAll('a.ev').length;out.back=document.querySelectorAll('a.back').length;
var small=[];document.querySelectorAll('svg text').forEach(function(t){var r=t.getBoundingClientRect();
if(r.height>0&&r.height<7)small.push(t.textContent);});out.small=small.slice(0,5);out.nsmall=small.length;
var wide=[];document.querySelectorAll('section').forEach(function(s){if(s.scrollWidth>s.clientWidth+1||s.getBoundingClientRect().right>window.innerWidth+1)wide.push(s.id);});
out.wide=wide;document.getElementById('probe').textContent=JSON.stringify(out);})();
</script>"""


def run_probe(tmp_path, html: str, width: int, script: str, height: int = 2400) -> dict:
    """The facts a probe `script` (a `<pre id="probe">` it fills with JSON) measures in `html` at `width` px: a
    copy of the page without the report's CSP meta (which would block the script); the report itself is
    unchanged. The one way the browser tests measure a page."""
    import json
    import re

    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace("</body>", script + "</body>")
    page = tmp_path / f"probe{width}.html"
    page.write_text(html, encoding="utf-8")
    r = chromium(tmp_path, f"--window-size={width},{height}", "--dump-dom", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, flags=re.S)
    assert m and m.group(1), "the probe did not run"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


def probe(tmp_path, path: str, width: int) -> dict:
    """Layout facts measured in the report at `path` at `width` px."""
    return run_probe(tmp_path, open(path, encoding="utf-8").read(), width, PROBE, 2000)


@pytest.mark.parametrize("n", [8, 256])
def test_narrow_window_no_overflow_and_every_anchor_resolves(tmp_path, n):
    """At 800 px the page is no wider than the window (tables and figures scroll inside their boxes), SVG
    labels stay readable, and every in-page link (each finding's evidence links, each row's link back, the
    nav and glossary) lands on an element that exists."""
    path = report(tmp_path, n=n)
    for width in (800, 1400):
        p = probe(tmp_path, path, width)
        assert p["page"] <= p["view"], p
        assert p["wide"] == [], p
        assert p["broken"] == [], p
        assert p["evidence"] >= 3 and p["back"] >= 3, p
        assert p["nsmall"] == 0, p


def test_the_probe_sees_overflow_and_broken_anchors(tmp_path):
    """Not vacuous: a page wider than the window and a dangling link are both reported."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><section id="s"><div style="width:1200px">x</div>'
                    '<a class="ev" href="#nowhere">x</a></section></body></html>')
    p = probe(tmp_path, str(page), 800)
    assert p["page"] > p["view"] and p["broken"] == ["nowhere"] and p["wide"] == ["s"]


@pytest.mark.real
def test_real_gpu_fixture_in_a_narrow_window(tmp_path):
    """The same layout checks on a report of a real GPU trace (HTA's nccl_data: mangled cuDNN kernel names,
    no memory events, one of two ranks)."""
    import os

    from llmdiag.diagnose.analyze import analyze_path

    src = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "fixtures", "real", "hta", "nccl_data.json.gz")
    assert os.path.exists(src), f"the shared real fixtures stand beside every checkout CI runs: {src}"
    a = analyze_path(src, jobs=1)
    path = render_report(a, str(tmp_path / "real.html"))
    p = probe(tmp_path, path, 800)
    assert p["page"] <= p["view"] and p["wide"] == [] and p["broken"] == [] and p["nsmall"] == 0, p
    assert p["evidence"] >= 1 and p["back"] >= 1, p
    import re

    kernels = open(path, encoding="utf-8").read().split('id="kernels"')[1].split("</section>")[0]
    assert "_ZN19cutlass" not in re.sub(r'title="[^"]*"', "", kernels) and "cutlass_cudnn_train::Kernel" in kernels
