"""A hostile summary is an input too: `render_report(read_summary(...))` with every string field of the model
holding markup, including the fields the figures' code treats as enums (a pipeline action's kind). Nothing of
it reaches the page as a tag or an attribute; an unknown enum is drawn as '?'."""

from __future__ import annotations

import json

import pytest

from llmdiag.diagnose.model.summary import read_summary
from llmdiag.reports.render import render_html
from tests.gen.summaries import analysis
from tests.unit.cli.test_terminal_layout import poison

MARKUP = ['<meta http-equiv=refresh content="0;url=//e.x">', '"><svg onload=alert(1)>', "</title><script>x()</script>"]


@pytest.mark.parametrize("evil", MARKUP)
def test_every_string_of_a_read_back_summary_is_escaped_in_the_report(tmp_path, evil):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(poison(analysis(8, pipeline=True).to_dict(), evil)), encoding="utf-8")
    a = read_summary(str(path))
    assert a.ranks[0].pipeline_actions[0].kind.endswith(evil)  # the enum field really holds the markup
    html = render_html(a)
    assert evil not in html
    assert "<meta http-equiv=refresh" not in html and "onload=" not in html.replace("onload=alert(1)&gt;", "")
    assert "<script>x()" not in html
    fig = html.split('id="fig-pipeline"')[1].split("</svg>")[0]
    assert ">?" in fig and evil.split()[0] not in fig  # the unknown kind drawn as '?', its text nowhere


def _moe(tmp_path):
    from llmdiag.diagnose.analyze import analyze_path
    from tests.gen.moe import moe_ep_ranks

    traces, _ = moe_ep_ranks([[64 * (1 + (s + d) % 3) for d in range(4)] for s in range(4)], steps=2, layers=2)
    for r, b in enumerate(traces):
        b.write(tmp_path / f"rank{r}.pt.trace.json.gz")
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.moe is not None
    return a


def _whatif(tmp_path):
    from llmdiag.diagnose.analyze import analyze_path
    from tests.gen.pipeline import write
    from tests.gen.planted import corpus

    write(corpus()[8], tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.whatif is not None and a.pipeline is not None
    return a


@pytest.mark.parametrize("build", [_moe, _whatif])
def test_moe_and_whatif_sections_of_a_hostile_summary_are_escaped_in_both_sinks(tmp_path, build):
    """The MoE, accumulation and what-if cards quote op types, roles and sources: markup and OSC 52 in them
    reach neither the page nor the terminal raw."""
    from llmdiag.diagnose.cli.terminal import render
    from tests.unit.cli.test_terminal_layout import OSC52, RAW

    evil = MARKUP[0] + OSC52
    path = tmp_path / "s.json"
    path.write_text(json.dumps(poison(build(tmp_path).to_dict(), evil)), encoding="utf-8")
    a = read_summary(str(path))
    html = render_html(a)
    assert MARKUP[0] not in html and "<meta http-equiv=refresh" not in html
    for width in (80, 160):
        assert RAW.findall(render(a, width=width)) == []
