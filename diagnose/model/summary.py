"""Summary files and manifests on disk: read, checked, slimmed. JSON exists only at this edge.

`Analysis.from_dict` / `Analysis.to_dict` convert; this module adds the files around them.
"""

from __future__ import annotations

import gzip
import zlib

import orjson

from diagnose.errors import LlmdiagError
from diagnose.model.analysis import Analysis
from diagnose.model.codec import Invalid, build
from diagnose.model.manifest import Manifest

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


def read_summary(path: str) -> Analysis:
    """A summary written by `analyze --json` (plain or gzipped)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = orjson.loads(raw)
    except OSError as e:
        raise LlmdiagError(f"cannot read: {e.strerror or e}", path) from None
    except (orjson.JSONDecodeError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise LlmdiagError(f"not valid JSON: {e}", path, f"expected {_WHAT}") from None
    return Analysis.from_dict(data, path)
