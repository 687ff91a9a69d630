"""One side of a check or diff as a summary dict: a summary JSON as is, anything else analyzed first.

A run folder, a trace folder or a single trace is analyzed afresh (the traces are the truth; a
`summary.json` left in a run folder may predate the current llmdiag). The dict goes through a JSON
round trip either way, so a check over a folder and a check over its `analyze --json` file see the same
types and give the same verdict.
"""

from __future__ import annotations

import gzip
import os
import zlib

import orjson

from diagnose.errors import LlmdiagError
from diagnose.model.analysis import SCHEMA_VERSION

_WHAT = "a run folder, a trace folder, a trace file, or a summary JSON from `llmdiag analyze --json`"


def _head(path: str, n: int = 1 << 16) -> bytes:
    with open(path, "rb") as f:
        raw = f.read(n)
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, n)
        except zlib.error:
            return b""
    return raw


def _is_trace(path: str) -> bool:
    head = _head(path)
    return b'"traceEvents"' in head or b'"schemaVersion"' in head or b'"deviceProperties"' in head


def read_summary(path: str) -> dict:
    """A summary written by `analyze --json` (plain or gzipped), checked for its schema version."""
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
    return check_summary(data, path)


def check_summary(data, path: str) -> dict:
    if not isinstance(data, dict) or "ranks" not in data or "schema_version" not in data:
        raise LlmdiagError("not an llmdiag summary (no 'schema_version' and 'ranks')", path,
                           "write one with `llmdiag analyze RUN --json FILE`")
    v = data["schema_version"]
    if not isinstance(v, int) or v > SCHEMA_VERSION:
        raise LlmdiagError(f"summary schema_version {v!r} is newer than this llmdiag reads "
                           f"({SCHEMA_VERSION})", path, "upgrade llmdiag, or re-record the summary")
    if not isinstance(data["ranks"], list) or any(not isinstance(r, dict) or "rank" not in r
                                                  for r in data["ranks"]):
        raise LlmdiagError("summary 'ranks' must be a list of per-rank objects with a 'rank'", path)
    return data


def normalize(data) -> dict:
    """Dataclass dict -> plain JSON types (numpy scalars become floats, tuples lists)."""
    opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    return orjson.loads(orjson.dumps(data, option=opts))


def analyze(path: str) -> dict:
    """Analyze traces with the default options (the analyzer is imported only when needed)."""
    try:
        from diagnose.analyze import analyze_path
    except ImportError as e:
        raise LlmdiagError(f"cannot analyze traces here: {e}", path,
                           "pass a summary JSON from `llmdiag analyze --json`") from None
    result = analyze_path(path)
    data = result.to_dict() if hasattr(result, "to_dict") else result
    return check_summary(normalize(data), path)


def load_side(path: str, role: str = "input") -> dict:
    """The summary dict of one side of a check or diff; `role` names it in error messages."""
    if not os.path.exists(path):
        raise LlmdiagError(f"no such file or folder ({role})", path, f"give {_WHAT}")
    if os.path.isdir(path):
        return analyze(path)
    try:
        trace = _is_trace(path)
    except OSError as e:
        raise LlmdiagError(f"cannot read: {e.strerror or e}", path) from None
    return analyze(path) if trace else read_summary(path)


def slim(summary: dict) -> dict:
    """The summary without its bulky timelines (memory curves, pipeline actions): what a baseline needs."""
    s = normalize(summary)
    for r in s.get("ranks") or []:
        for m in r.get("memory") or []:
            m["timeline"] = []
        r["pipeline_actions"] = []
    return s


def main(argv: list[str] | None = None) -> None:
    """`python -m diagnose.gate.sides SIDE OUT.json`: write a slim summary to commit as a baseline."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.exit("usage: python -m diagnose.gate.sides RUN|TRACES|SUMMARY OUT.json")
    try:
        data = slim(load_side(args[0]))
        with open(args[1], "wb") as f:
            f.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    except (LlmdiagError, OSError) as e:
        sys.exit(e.line() if isinstance(e, LlmdiagError) else f"llmdiag: {args[1]}: {e}")


if __name__ == "__main__":  # pragma: no cover
    main()
