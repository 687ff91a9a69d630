"""The JSON edge of the typed model: what a summary may hold, what it may not, and that schema 1 still reads."""

from __future__ import annotations

import copy
import dataclasses

import orjson
import pytest

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.analysis import SCHEMA_VERSION, Analysis, Evidence, Finding
from llmdiag.diagnose.model.format import fmt, fmt_delta
from llmdiag.diagnose.model.summary import manifest_from_dict, read_summary, slim
from llmdiag.diagnose.rules import findings
from tests.gen.summaries import analysis, busy, typed


def _with_findings() -> Analysis:
    a = typed(busy())
    a.findings = findings(a)
    return a


def test_round_trip_is_exact():
    a = _with_findings()
    d = a.to_dict()
    assert d["schema_version"] == SCHEMA_VERSION == 2
    assert Analysis.from_dict(orjson.loads(orjson.dumps(d))) == a
    assert isinstance(a.findings[0].evidence, Evidence)


def test_schema_1_findings_are_upgraded():
    a = _with_findings()
    d = a.to_dict()
    d["schema_version"] = 1
    for f in d["findings"]:  # as schema 1 wrote them: evidence text beside ranks, steps and metric
        ev = f.pop("evidence")
        f.update(evidence=ev["text"], ranks=ev["ranks"], steps=ev["steps"], metric=ev["metric"])
        del f["gain_frac"]
    b = Analysis.from_dict(d)
    # schema 1 recorded no provenance: its findings read back with the defaults (source "trace", no events)
    old = [(f.id, dataclasses.replace(f.evidence, events=[], source="trace"), f.gain_ms) for f in a.findings]
    assert [(f.id, f.evidence, f.gain_ms) for f in b.findings] == old
    assert all(isinstance(f, Finding) and f.gain_frac is None for f in b.findings)


@pytest.mark.parametrize("path,value,what", [
    (("ranks", 0, "step_time_ms"), "fast", "ranks.0.step_time_ms is not a number"),
    (("ranks", 1, "steps", 0, "step"), 1.5, "ranks.1.steps.0.step is not an integer"),
    (("ranks", 0, "comm_by_kind"), {}, "ranks.0.comm_by_kind is not a list"),
    (("aggregate", "overlap_ratio_min"), float("inf"), None),  # orjson writes inf as null: undefined, allowed
    (("skew", "stragglers", 0), {"rank": "5", "reason": "x", "value": 0.5}, "skew.stragglers.0.rank is not an integer"),
    (("manifest", "oversubscribed"), "yes", "manifest.oversubscribed is not true or false"),
    (("ranks", 0, "rank"), None, "ranks.0.rank is missing"),
])
def test_a_wrong_type_is_one_line_naming_the_field(path, value, what):
    d = busy()
    d["skew"]["stragglers"] = [{"rank": 5, "reason": "arrives last at collectives", "value": 0.875}]
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    d = orjson.loads(orjson.dumps(d, option=orjson.OPT_SERIALIZE_NUMPY))
    if what is None:
        Analysis.from_dict(d)
        return
    with pytest.raises(LlmdiagError) as e:
        Analysis.from_dict(d, "s.json")
    assert e.value.line() == f"llmdiag: s.json: invalid summary: {what}"


@pytest.mark.parametrize("v,word", [(4, r"newer than this llmdiag reads \(3\)"), (3, "without its encoding"), (0, "is not a version"),
                                    ("1", "is not a version"), (True, "is not a version")])
def test_schema_version(v, word):
    d = busy()
    d["schema_version"] = v
    with pytest.raises(LlmdiagError, match=word):
        Analysis.from_dict(d)
    with pytest.raises(LlmdiagError, match="not an llmdiag summary"):
        Analysis.from_dict({"ranks": []})


def test_manifest_keeps_keys_it_does_not_know():
    d = analysis(2).to_dict()["manifest"]
    d["from_the_future"] = {"x": [1, 2]}
    m = manifest_from_dict(copy.deepcopy(d), "manifest.json")
    assert m.extra == {"from_the_future": {"x": [1, 2]}} and m.device.name.startswith("NVIDIA")
    a = analysis(2)
    a.manifest = m
    assert a.to_dict()["manifest"] == d
    with pytest.raises(LlmdiagError, match="manifest.json: invalid manifest: world_size is not an integer"):
        manifest_from_dict({**d, "world_size": "2"}, "manifest.json")


def test_non_utf8_names_are_mended_at_the_edge():
    a = analysis(2)
    a.ranks[0].file = "traces/rank\udcff0.json"  # a file name that is not UTF-8, as Python decodes it
    d = a.to_dict()
    orjson.dumps(d)
    assert d["ranks"][0]["file"] == "traces/rank\ufffd0.json"


def test_slim_summary_reads_back(tmp_path):
    p = tmp_path / "base.json"
    p.write_bytes(orjson.dumps(slim(_with_findings())))
    b = read_summary(str(p))
    assert all(not m.timeline for r in b.ranks for m in r.memory) and all(not r.pipeline_actions for r in b.ranks)


def test_formatter():
    assert fmt(5 * 2**20, "bytes") == "5.00 MiB" and fmt(512, "bytes") == "512 B" and fmt(None, "bytes") == "n/a"
    assert fmt_delta(0.05, "pct") == "+5.0 pt" and fmt_delta(-2.0, "ms", 10.0) == "-2.00 ms (-20.0%)"
    assert fmt_delta(None, "ms") == "n/a" and fmt(float("inf"), "ms") == "n/a"
