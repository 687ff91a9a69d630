"""Every key of the JSON summary is named in the docs' "Summary fields" table (the frozen-surface habit).

The key paths come two ways, neither from the docs: the summary's dataclasses walked from their type hints
(every field that can appear, also those None in a given job; the writer, model/codec.py, writes exactly
the fields), and the summaries of generated jobs that exercise every section (CPU and GPU ranks with
communication, a pipeline with its what-if replay, MoE all-to-alls, gradient accumulation, several runs in one
folder). Lists collapse to `[]`; an object with free keys (rank -> ms) is one path.

The docs' side: the rows of each Markdown table under a `## Summary fields` heading in docs/metrics.md or
docs/simulation.md, whose first cell is the key path in backticks. A new summary field fails here with its
path listed: add a row for it.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path, analyze_runs
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.codec import type_hints
from tests.gen import summaries
from tests.gen.moe import moe_ep_ranks
from tests.gen.pipeline import Case, write as write_pipeline
from tests.unit.metrics.test_accum import _fsdp_rank
from tests.unit.metrics.test_runs_folders import APART_US, WALL_US, write_run

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "metrics.md", ROOT / "docs" / "simulation.md"]
HEADING = "## Summary fields"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def documented() -> set[str]:
    """Key paths in the first cell of the table rows under each `## Summary fields` heading (until the next
    heading of level 1 or 2)."""
    out = set()
    for doc in DOCS:
        inside = False
        for line in doc.read_text(encoding="utf-8").splitlines():
            if line.startswith("#") and not line.startswith("###"):
                inside = line.strip() == HEADING
            elif inside and (m := ROW.match(line)):
                out.add(m.group(1))
    return out


def _is_record(tp) -> bool:
    return dataclasses.is_dataclass(tp) or typing.get_origin(tp) in (list, dict)


def schema_paths(tp=Analysis, prefix: str = "", out: dict | None = None) -> dict[str, bool]:
    """path -> whether it holds a record (a dataclass: its keys are fields), from the type hints alone."""
    out = {} if out is None else out
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for a in typing.get_args(tp):
            if a is not type(None):
                schema_paths(a, prefix, out)
    elif dataclasses.is_dataclass(tp):
        out[prefix] = True
        hints = type_hints(tp)
        for f in dataclasses.fields(tp):
            if not f.metadata.get("rest"):  # Manifest.extra: foreign keys kept verbatim, merged into its parent
                schema_paths(hints[f.name], f"{prefix}.{f.name}" if prefix else f.name, out)
    elif origin is list and _is_record((typing.get_args(tp) or (None,))[0]):
        out.setdefault(prefix, False)
        schema_paths(typing.get_args(tp)[0], prefix + "[]", out)
    elif origin is dict and len(typing.get_args(tp)) == 2 and dataclasses.is_dataclass(typing.get_args(tp)[1]):
        out.setdefault(prefix, False)
        schema_paths(typing.get_args(tp)[1], prefix + "{}", out)
    else:
        out.setdefault(prefix, False)
    return out


def data_paths(v, records: set[str], prefix: str = "", out: set | None = None) -> set[str]:
    """Key paths of one summary: objects are descended into only where the schema says they are records
    (elsewhere their keys are data), lists through their elements as `[]`; an unknown object key is kept."""
    out = set() if out is None else out
    if isinstance(v, dict) and (prefix in records or prefix == ""):
        for k, x in v.items():
            p = f"{prefix}.{k}" if prefix else k
            out.add(p)
            data_paths(x, records, p, out)
    elif isinstance(v, list):
        for x in v:
            data_paths(x, records, prefix + "[]", out)
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[dict]:
    """Summaries of generated jobs that, together, fill every section of the summary."""
    tmp = tmp_path_factory.mktemp("docs_keys")
    out = [summaries.summary(8, pipeline=True), summaries.summary(4, gpu=False)]
    write_pipeline(Case(p=4, m=8, slow_stage=3, lat_us=30, steps=3), tmp / "pp")  # pipeline, p2p, what-if
    out.append(analyze_path(str(tmp / "pp")).to_dict())
    traces, _ = moe_ep_ranks([[0, 300, 100, 100], [200, 0, 100, 100], [100, 100, 0, 300], [100, 100, 300, 0]])
    (tmp / "moe").mkdir()
    for r, b in enumerate(traces):
        b.write(tmp / "moe" / f"rank{r}.pt.trace.json")
    out.append(analyze_path(str(tmp / "moe")).to_dict())
    (tmp / "accum").mkdir()
    for r in range(2):
        _fsdp_rank(r, 4).write(tmp / "accum" / f"rank{r}.pt.trace.json")
    out.append(analyze_path(str(tmp / "accum")).to_dict())
    (tmp / "runs").mkdir()
    write_run(tmp / "runs", WALL_US, 54105)
    write_run(tmp / "runs", WALL_US + APART_US, 55988, tag="second")
    out += [a.to_dict() for a in analyze_runs(str(tmp / "runs"), run="all")]
    return out


def _fields(paths) -> set[str]:
    """Paths that name a key: `ranks[]` (an element of a list) is its list's row, not a key of its own."""
    return {p for p in paths if p and not p.endswith(("[]", "{}"))}


def _rows(paths) -> str:
    return "\n".join(f"| `{p}` | UNIT | MEANING |" for p in sorted(paths))


def test_the_generated_jobs_fill_every_section(generated):
    """The data walk means something only if the jobs reach every section."""
    for section in ("ranks", "pipeline", "skew", "moe", "accum", "whatif", "steps", "runs", "findings",
                    "manifest"):
        assert any(s.get(section) for s in generated), f"no generated summary has a non-empty {section!r}"
    assert any(r["trace_kind"] == "cpu" for s in generated for r in s["ranks"])
    assert any(c for s in generated for r in s["ranks"] if r["trace_kind"] == "gpu" for c in r["comm_by_kind"])
    assert any(s["skew"] and s["skew"]["p2p"] for s in generated)


def test_summaries_hold_only_schema_fields(generated):
    """The writer writes the dataclasses' fields and nothing else (Manifest.extra's foreign keys aside), so the
    schema walk below sees every key a summary can have."""
    schema = schema_paths()
    records = {p for p, rec in schema.items() if rec}
    seen = set().union(*(data_paths(s, records) for s in generated))
    extra = {p for p in seen - set(schema) if not p.startswith("manifest.")}
    assert not extra, "summary keys that are no dataclass field:\n" + "\n".join(sorted(extra))


def test_every_summary_field_is_documented(generated):
    schema = schema_paths()
    records = {p for p, rec in schema.items() if rec}
    seen = set().union(*(data_paths(s, records) for s in generated))
    keys = _fields(schema) | _fields(p for p in seen if not p.startswith("manifest.") or p in schema)
    missing = keys - documented()
    assert not missing, (f"{len(missing)} summary fields are not in a `{HEADING}` table of docs/metrics.md or "
                         f"docs/simulation.md; add these rows (unit and meaning filled in):\n" + _rows(missing))


def test_every_documented_field_exists():
    """A row for a field that no longer exists (renamed, removed) is wrong documentation."""
    stale = documented() - _fields(schema_paths())
    assert not stale, "documented summary fields that the summary does not have:\n" + "\n".join(sorted(stale))


def test_the_table_parser_reads_the_rows():
    """The docs' table is found at all (a renamed heading would make every field look undocumented)."""
    docs = documented()
    assert {"aggregate.step_time_ms", "ranks[].overlap_ratio", "whatif.slowdown"} <= docs
