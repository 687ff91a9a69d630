"""One side of a check or diff as a typed Analysis: a summary JSON read back, anything else analyzed first.

A run folder, a trace folder or a single trace is analyzed afresh (the traces are the truth; a
`summary.json` left in a run folder may predate the current llmdiag). A fresh analysis goes through the
same JSON round trip a summary file went through (`to_dict`, then `from_dict`), so a check over a folder
and a check over its `analyze --json` file see the same values and give the same verdict.
"""

from __future__ import annotations

import os
import zlib

import orjson

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.files import special, write_atomic
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.model.summary import read_summary, slim

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


def analyze(path: str) -> Analysis:
    """Analyze traces with the default options, read back as a summary file would be."""
    from llmdiag.diagnose.analyze import analyze_path  # the analyzer only when a side needs it: a JSON check stays light

    return Analysis.from_dict(analyze_path(path).to_dict(), path)


def load_side(path: str, role: str = "input") -> Analysis:
    """The Analysis of one side of a check or diff; `role` names it in error messages."""
    if not os.path.exists(path):
        raise LlmdiagError(f"no such file or folder ({role})", path, f"give {_WHAT}")
    if os.path.isdir(path):
        return analyze(path)
    if (kind := special(path)) is not None:  # a FIFO would block the first read forever
        raise LlmdiagError(f"not a regular file ({kind}) ({role})", path, f"give {_WHAT}")
    try:
        trace = _is_trace(path)
    except OSError as e:
        raise LlmdiagError(f"cannot read: {e.strerror or e}", path) from None
    return analyze(path) if trace else read_summary(path)


def main(argv: list[str] | None = None) -> None:
    """`python -m llmdiag.diagnose.gate.sides SIDE OUT.json`: write a slim summary to commit as a baseline."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.exit("usage: python -m llmdiag.diagnose.gate.sides RUN|TRACES|SUMMARY OUT.json")
    try:
        data = slim(load_side(args[0]))
        write_atomic(args[1], orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    except LlmdiagError as e:
        sys.exit(e.line())


if __name__ == "__main__":  # pragma: no cover
    main()
