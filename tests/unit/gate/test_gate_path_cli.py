"""`llmdiag check` and `llmdiag diff` on the critical path through the CLI (issue 34): summary files with a known
path change (and a twin without), at 80 and 160 columns (every line measured), with their JUnit, JSON and HTML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import orjson
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main as cli_main
from tests.gen import summaries
from tests.unit.gate.test_gate_path import with_path


@pytest.fixture
def sides(tmp_path):
    out = {}
    for name, kw in (("base", {}), ("twin", {}), ("moved", {"shift": 8.0}), ("sampled", {"sampled": {1}})):
        p = tmp_path / f"{name}.json"
        p.write_bytes(orjson.dumps(with_path(summaries.summary(4), **kw)))
        out[name] = str(p)
    return out


def _run(*args, width: int):
    r = CliRunner().invoke(cli_main, [str(a) for a in args], env={"COLUMNS": str(width)})
    widest = max(map(len, r.output.splitlines()))
    assert widest <= width, f"{widest} columns at {width}:\n{r.output}"
    return r


@pytest.mark.parametrize("width", [80, 160])
def test_check_cli_fails_the_moved_path_and_passes_the_twin(sides, tmp_path, width):
    junit, verdict = tmp_path / "gate.xml", tmp_path / "gate.json"
    r = _run("check", sides["moved"], "--baseline", sides["base"], "--junit", junit, "--json", verdict, width=width)
    assert r.exit_code == 1 and "FAIL: 2 of 9 gates failed" in r.output
    lines = [x for x in r.output.splitlines() if x.startswith(("path_comm ", "path_compute "))]
    assert len(lines) == 2 and all("FAIL" in x and "job" in x for x in lines)  # one line each, the name whole
    results = {x["metric"]: x for x in orjson.loads(verdict.read_bytes())["results"]}
    comm = results["path_comm"]
    assert (comm["status"], comm["baseline"], comm["current"]) == ("fail", 0.2, pytest.approx(0.28))
    assert comm["delta"] == pytest.approx(0.08) and comm["threshold"] == pytest.approx(0.26)  # 5 pt + σ (1 pt)
    cases = {c.get("classname"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["llmdiag.check.path_comm"].find("failure").get("type") == "regression"
    assert cases["llmdiag.check.path_cpu"].find("failure") is None
    twin = _run("check", sides["twin"], "--baseline", sides["base"], width=width)
    assert twin.exit_code == 0 and "PASS: 9 gates" in twin.output


@pytest.mark.parametrize("width", [80, 160])
def test_check_cli_on_a_sampled_side_says_not_compared(sides, tmp_path, width):
    junit = tmp_path / "gate.xml"
    r = _run("check", sides["sampled"], "--baseline", sides["base"], "--junit", junit, width=width)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "path_comm, path_cpu, path_launch, path_kernel_gap: not compared: current: no job critical path: not " \
        "determined: rank 1's capture" in flat
    skipped = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("skipped") is not None]
    assert {c.get("classname") for c in skipped} == {f"llmdiag.check.path_{w}" for w in
                                                     ("cpu", "compute", "comm", "launch", "kernel_gap")}
    assert _run("check", sides["sampled"], "--baseline", sides["base"], "--strict", width=width).exit_code == 1


@pytest.mark.parametrize("width", [80, 160])
def test_diff_cli_prints_the_path_side_by_side(sides, tmp_path, width):
    html, js = tmp_path / "d.html", tmp_path / "d.json"
    r = _run("diff", sides["base"], sides["moved"], "--html", html, "--json", js, width=width)
    assert r.exit_code == 0
    rows = {x.split("  ")[0]: x for x in r.output.splitlines() if x.startswith(("job ", "rank "))}
    assert set(rows) == {f"{w} {x}" for w in ("job", "rank") for x in ("length", "cpu", "compute", "comm", "launch",
                                                                         "kernel-kernel")}
    assert rows["job comm"].split()[2:] == ["20.0%", "28.0%", "+8.0", "pt", "up", "worse"]
    assert rows["job compute"].split()[2:] == ["70.0%", "62.0%", "-8.0", "pt", "down", "worse"]
    section = next(s for s in orjson.loads(js.read_bytes())["sections"] if s["title"].startswith("Critical path"))
    assert {x["name"]: x["delta"] for x in section["rows"]}["job comm"] == pytest.approx(0.08)
    assert "job comm" in html.read_text()
    sampled = _run("diff", sides["base"], sides["sampled"], "--html", html, width=width)
    assert "job path not compared: B: no job critical path" in " ".join(sampled.output.split())
    assert "job path not compared" in html.read_text()
