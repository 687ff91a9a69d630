"""Whether an input is a straggler study's op table (io/megatron_ops.py reads it): asked of every `analyze`
input, so it lives apart from the reader, whose columns and dataclass a Kineto trace never needs (issue #30)."""

from __future__ import annotations

import glob
import os

from llmdiag.diagnose.errors import LlmdiagError


def find_op_table(path: str) -> str | None:
    """The op table a path names: a `.parquet` file, or the one `trace-*.parquet` of a folder (the artifact's
    layout; its timeline-*.json.gz are Chrome traces of ops, not Kineto ranks). None: not an op table."""
    if os.path.isfile(path):
        return path if path.endswith(".parquet") else None
    if not os.path.isdir(path):
        return None
    found = sorted(glob.glob(os.path.join(glob.escape(path), "trace-*.parquet")))
    if len(found) > 1:
        raise LlmdiagError(f"{len(found)} straggler-study op tables in one folder", path,
                           "analyze one: " + ", ".join(os.path.basename(f) for f in found[:4]))
    if found and (others := _traces_beside(path)):
        raise LlmdiagError(f"a straggler-study op table and {len(others)} Kineto trace file(s) in one folder "
                           f"({', '.join(others[:2])})", path,
                           f"analyze {os.path.basename(found[0])} or the traces, each given on its own")
    return found[0] if found else None


ARTIFACT_JSON = ("timeline-", "ideal-timeline-", "result-", "ms-", "mw-")  # the artifact's own JSON files


def _traces_beside(folder: str) -> list[str]:
    """Trace-like files (*.json, *.json.gz) in `folder` that are not the artifact's own: analysing the table
    alone would leave them out without a word."""
    names = sorted(n for n in os.listdir(folder) if n.endswith((".json", ".json.gz")) and not n.startswith(ARTIFACT_JSON))
    return names
