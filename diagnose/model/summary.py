"""Summary files and manifests on disk: read, checked, slimmed. JSON exists only at this edge.

`Analysis.from_dict` / `Analysis.to_dict` convert; this module adds the files around them.
"""

from __future__ import annotations

import orjson

from diagnose.errors import LlmdiagError
from diagnose.model.files import SUMMARY_BUDGET, read_bounded
from diagnose.model.analysis import Analysis
from diagnose.model.codec import Invalid, build, no_gc
from diagnose.model.manifest import Manifest
from diagnose.model.pack import pack, should_pack

_WHAT = "a run folder, a trace folder, a trace file, or a summary JSON from `llmdiag analyze --json`"


def manifest_from_dict(data: dict, where: str) -> Manifest:
    try:
        return build(Manifest, data)
    except Invalid as e:
        raise LlmdiagError(f"invalid manifest: {e}", where) from None


def slim(a: Analysis) -> dict:
    """The summary without its bulky timelines (memory curves, pipeline actions): what a baseline needs."""
    d = a.to_dict()
    for r in d["ranks"]:
        for m in r["memory"]:
            m["timeline"] = []
        r["pipeline_actions"] = []
    return d


def summary_bytes(summary: dict) -> bytes:
    """The summary file's bytes: indented schema 2 for a job people read by eye, packed schema 3 (no
    indentation, columns, kernel names once: model/pack.py) above PACK_ABOVE_RANKS ranks, so that a
    16,384-rank summary stays well under 64 MB."""
    opt = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    with no_gc():
        packed = pack(summary) if should_pack(summary) else None
    if packed is not None:
        return orjson.dumps(packed, option=opt)
    return orjson.dumps(summary, option=opt | orjson.OPT_INDENT_2)


def read_summary(path: str) -> Analysis:
    """A summary written by `analyze --json` (plain or gzipped), read within a byte budget (a regular file
    only: a FIFO or /dev/zero is refused in one line)."""
    raw = read_bounded(path, SUMMARY_BUDGET, "summary")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise LlmdiagError(f"not valid JSON: {e}", path, f"expected {_WHAT}") from None
    return Analysis.from_dict(data, path)
