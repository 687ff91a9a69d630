"""The report in a real browser: headless Chromium loads it offline, logs nothing on the console (no script
error, no Content-Security-Policy violation), runs the one allowed script, and paints a non-blank page.

Skipped where Chromium is absent (`make browser` installs it where it can).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from diagnose.rules import findings
from reports.render import render_report
from tests.summaries import busy, typed

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
    image = pytest.importorskip("PIL.Image")
    with image.open(png) as im:
        colours = im.convert("L").resize((70, 150)).getextrema()
    assert colours[1] - colours[0] > 100  # text and charts, not a blank page
