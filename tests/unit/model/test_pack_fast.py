"""The packed summary written straight from the dataclasses (model/pack_write.py) and read straight from its
columns (model/pack_read.py) against the general path they replace: `summary_bytes(a.to_dict())` for the
bytes, `build(Analysis, unpack(d))` for the analysis read back. The general path is the independent answer:
it walks plain dicts with no knowledge of the model's types.
"""

from __future__ import annotations

import copy
import dataclasses

import orjson
import pytest

from benchmarks import generate
from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.codec import Invalid, build, to_json_dict
from llmdiag.diagnose.model.pack import PACK_ABOVE_RANKS, unpack
from llmdiag.diagnose.model.pack_read import read_packed
from llmdiag.diagnose.model.summary import analysis_bytes, summary_bytes
from llmdiag.diagnose.rules import findings
from tests.gen import summaries
from tests.gen.pipeline import Case, write as write_pipeline

N = 260  # above PACK_ABOVE_RANKS: packed


def _grow(base: Analysis, n: int = N) -> Analysis:
    """`base`'s ranks repeated to n (records shared between copies, as a worst case for identity-keyed logic)."""
    ranks = [dataclasses.replace(base.ranks[i % len(base.ranks)], rank=i,
                                 step_time_ms=base.ranks[i % len(base.ranks)].step_time_ms * (1 + i / 997))
             for i in range(n)]
    a = copy.copy(base)
    a.ranks, a.world_size = ranks, n
    a.findings = findings(a)
    return a


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Analysis:
    d = tmp_path_factory.mktemp("gen") / "r8"
    generate.write_set(str(d), ranks=8, mb=0.05, steps=3, jobs=1)
    return _grow(analyze_path(str(d), jobs=1))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Analysis:
    d = tmp_path_factory.mktemp("pp")
    write_pipeline(Case(p=2, m=4), d)
    return _grow(analyze_path(str(d), jobs=1))


def _ragged(a: Analysis) -> Analysis:
    """Shapes that stop a column being hoisted: a rank without steps or kernels, records missing on some ranks,
    coordinates of other keys, more memory timelines than are kept, a kernel first seen late."""
    a = copy.copy(a)
    a.ranks = [dataclasses.replace(r) for r in a.ranks]
    a.ranks[5].steps = []
    a.ranks[6].top_kernels = []
    a.ranks[7].idle = None
    a.ranks[8].coords = {"dp": 3, "zz": "x"}
    a.ranks[9].warnings = ["a warning"]
    a.ranks[200].top_kernels = a.ranks[200].top_kernels + [dataclasses.replace(a.ranks[200].top_kernels[0],
                                                                               name="late_kernel")]
    for r in a.ranks[::3]:
        r.memory = [dataclasses.replace(m, timeline=[[0.0, 1.0, 2.0], [1.0, float(r.rank), 3.0]],
                                        peak_allocated=m.peak_allocated + r.rank) for m in r.memory]
    return a


@pytest.fixture(scope="module")
def cases(generated, pipeline) -> dict[str, Analysis]:
    return {"generated": generated, "pipeline": pipeline, "ragged": _ragged(generated),
            "evil manifest": _grow(summaries.analysis(8, pipeline=True, evil=True)),
            "healthy manifest": _grow(summaries.analysis(8))}


def test_written_from_the_objects_is_byte_identical(cases):
    for name, a in cases.items():
        for n in (N, PACK_ABOVE_RANKS, 16):  # packed, and plain schema 2 at and below the threshold
            b = copy.copy(a)
            b.ranks = a.ranks[:n]
            raw, shown = analysis_bytes(b)
            assert raw == summary_bytes(b.to_dict()), (name, n)
            assert shown is b
            assert orjson.loads(raw)["schema_version"] == (3 if n > PACK_ABOVE_RANKS else 2)


def test_lone_surrogates_and_huge_ints_are_mended_as_before(generated):
    a = _ragged(generated)
    a.ranks[0].file = "bad\udcffname.json"  # a non-UTF-8 file name, as Python decodes it
    a.ranks[1].warnings = ["read from x\udcfe.json"]
    a.ranks[2].top_kernels[0] = dataclasses.replace(a.ranks[2].top_kernels[0], count=2**70)
    raw, shown = analysis_bytes(a)
    assert raw == summary_bytes(to_json_dict(a)[0])
    assert shown is not a and shown.ranks[0].file == "bad\ufffdname.json"  # the report shows what the file says
    assert a.ranks[0].file == "bad\udcffname.json"  # the analysis itself keeps the real name (paths on disk)
    assert shown.ranks[2].top_kernels[0].count == float(2**70)


def test_a_trace_name_spelling_a_packed_key_is_written_plain(generated):
    a = copy.copy(generated)
    a.ranks = [dataclasses.replace(r) for r in generated.ranks]
    a.ranks[3].hints = dataclasses.replace(a.ranks[3].hints, gemm_ms_by_precision={"@columns": 1.0, "@cells": 2.0})
    raw, _ = analysis_bytes(a)
    assert raw == summary_bytes(a.to_dict())
    assert orjson.loads(raw)["schema_version"] == 2  # plain: the reader cannot mistake it for a table
    assert Analysis.from_dict(orjson.loads(raw)).ranks[3].hints.gemm_ms_by_precision == {"@columns": 1.0, "@cells": 2.0}


def test_read_from_the_columns_equals_the_general_reader(cases):
    for name, a in cases.items():
        d = orjson.loads(analysis_bytes(a)[0])
        before = orjson.dumps(d)
        fast = read_packed(Analysis, d)  # no fallback here: the shapes the writer makes are all taken
        assert fast == build(Analysis, unpack(d)), name
        assert orjson.dumps(d) == before  # the dict read is left as it was
        assert Analysis.from_dict(d) == fast
        assert fast.schema_version == 2 and len(fast.ranks) == N


def _general(d: dict):
    """What the general reader makes of `d`: the analysis, or its one-line error."""
    try:
        return build(Analysis, unpack(d))
    except Invalid as e:
        return f"llmdiag: s.json: invalid summary: {e}"


def test_a_bad_packed_file_is_read_or_refused_as_before(generated):
    d = orjson.loads(analysis_bytes(_ragged(generated))[0])
    cols = d["ranks"]["@columns"]

    def cell(dd, key):
        return dd["ranks"]["@cells"][cols.index(key)]

    edits = {
        "step time a string": lambda dd: cell(dd, "step_time_ms").__setitem__(3, "slow"),
        "rank a float": lambda dd: cell(dd, "rank").__setitem__(4, 4.5),
        "rank an integral float": lambda dd: cell(dd, "rank").__setitem__(4, 4.0),
        "kernel index out of range": lambda dd: cell(dd, "top_kernels")[0]["@cells"][0].__setitem__(0, 10_000),
        "column cut short": lambda dd: cell(dd, "host").pop(),
        "unknown column": lambda dd: (dd["ranks"]["@columns"].append("novel"), dd["ranks"]["@cells"].append([1] * N)),
    }
    for name, edit in edits.items():
        dd = copy.deepcopy(d)
        edit(dd)
        want = _general(dd)
        if isinstance(want, str):
            with pytest.raises(LlmdiagError) as got:
                Analysis.from_dict(dd, "s.json")
            assert str(got.value) == want, name
        else:
            assert Analysis.from_dict(dd, "s.json") == want, name
    assert isinstance(_general(_edited(d, edits["step time a string"])), str)  # the edits do test something
    assert _general(_edited(d, edits["rank an integral float"])).ranks[4].rank == 4


def _edited(d: dict, edit) -> dict:
    dd = copy.deepcopy(d)
    edit(dd)
    return dd
