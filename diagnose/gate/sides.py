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
from llmdiag.diagnose.model.format import ranges
from llmdiag.diagnose.model.runs import run_count
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


def analyze(path: str, run: str | int = "newest") -> Analysis:
    """Analyze traces with the default options, read back as a summary file would be."""
    from llmdiag.diagnose.analyze import analyze_path  # the analyzer only when a side needs it: a JSON check stays light

    return Analysis.from_dict(analyze_path(path, run=run).to_dict(), path)


def load_side(path: str, role: str = "input", run: str | int | None = "any", flag: str = "--run") -> Analysis:
    """The Analysis of one side of a check or diff; `role` names it in error messages.

    `run` says which run of an input holding several (a profiler folder reused across CI runs) the side is:
    "any" (diff: analyze's default, the newest complete run, named in the output), None (check without `flag`:
    an input of several runs is refused), "newest" (the newest run, complete or not: an older complete run never
    stands in for it) or a run number, 1 the oldest. A summary describes one run: it must be the one asked for."""
    if not os.path.exists(path):
        raise LlmdiagError(f"no such file or folder ({role})", path, f"give {_WHAT}")
    if os.path.isdir(path):
        a = analyze(path)
    elif (kind := special(path)) is not None:  # a FIFO would block the first read forever
        raise LlmdiagError(f"not a regular file ({kind}) ({role})", path, f"give {_WHAT}")
    else:
        try:
            trace = _is_trace(path)
        except OSError as e:
            raise LlmdiagError(f"cannot read: {e.strerror or e}", path) from None
        a = analyze(path) if trace else read_summary(path)
    if run == "any":
        return a
    if os.path.isdir(path) or _is_trace(path):
        want = pick_run(a, path, role, run, flag)
        return a if want == analysed_run(a) else analyze(path, run=want)
    return summary_run(a, path, role, run, flag)


def summary_run(a: Analysis, path: str, role: str, run: str | int | None, flag: str = "--run") -> Analysis:
    """`a`, read from a summary, if it describes the run asked for (see load_side); else one line."""
    want = pick_run(a, path, role, run, flag)
    if want != analysed_run(a):
        raise LlmdiagError(f"the summary ({role}) describes run {analysed_run(a)} of the {run_count(a.runs)} its input "
                           f"held, not run {want}", path, f"analyse the input with `llmdiag analyze INPUT --run {want} "
                                                           "--json FILE`, or gate the input itself")
    return a


def analysed_run(a: Analysis) -> int | None:
    """The number of the run `a` describes (1 where its input held one run); None where its run list marks none,
    or several, as analysed (an edited summary: it then describes no run a check can name)."""
    if not a.runs:
        return 1
    marked = [r.number for r in a.runs if r.analysed]
    return marked[0] if len(marked) == 1 else None


def pick_run(a: Analysis, path: str, role: str, run: str | int | None, flag: str) -> int:
    """The run number a check gates (see load_side), or one line refusing to choose."""
    n = max(run_count(a.runs), 1)  # a summary of many runs lists some of them (model/runs.py)
    if run is None:
        if n == 1:
            return 1
        newest = a.runs[-1]
        world = newest.world_size or 0
        state = ("complete" if world and sorted(newest.ranks) == list(range(world)) and newest.files == world else
                 f"incomplete: {newest.files} file(s), ranks {ranges(newest.ranks) or 'none'} of "
                 f"{world or 'an unknown world'}")
        kind = "folder" if os.path.isdir(path) else "summary's input"
        raise LlmdiagError(f"the {kind} ({role}) holds {n} runs; the newest, run {n}, is {state}", path,
                           f"gate one: {flag} newest or {flag} N (1 = the oldest); an older run never stands in for "
                           "the newest")
    want = n if run == "newest" else int(run)
    if not 1 <= want <= n:
        raise LlmdiagError(f"{flag} {want}: the {role} holds {f'{n} runs (1-{n}, oldest first)' if n > 1 else 'one run'}",
                           path)
    return want


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
