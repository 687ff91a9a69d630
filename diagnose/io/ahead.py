"""A small input's traces parsed in a forked child while the command imports its analysis: the start-up's second core.

`llmdiag analyze` spends ~110 ms once its arguments are read importing numpy, the parser, the per-rank metrics,
the job's sections, the rules, the summary writer, jinja2 and the report, on one core, and parsed the first trace
(10-120 ms for a 2-35 MB trace) only after most of them. Here the parse starts first, in a child forked as soon
as the input is known (io/forked.py), which imports only numpy and the parser (~45 ms) before parsing; the traces
come back pickled (the columns: ~0.1 of the JSON's size, ~1-3 ms each way) to this process, which imports the
rest meanwhile.

Each trace comes back with its identity (cache.py: path, size, mtime, inode, both ends hashed) as the child read
it, and `load_trace` takes it from here (`claim`) only while the file still has that identity: a trace replaced
since is parsed again. A file that does not parse comes back as nothing: its job parses it again and names the
problem as it always does. Nothing is kept past the jobs (`release`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdiag.diagnose.io import forked

if TYPE_CHECKING:  # the child imports numpy and the parser itself: this module is loaded before them
    from llmdiag.diagnose.io.trace import RankTrace

# Parsed ahead, not yet claimed: path -> (its identity when parsed, the trace). Filled by `Ahead.take` only.
_PARSED: dict[str, tuple[str, RankTrace]] = {}


class Ahead:
    """The child parsing `files`; `take()` waits for it and keeps what it parsed for `claim`."""

    def __init__(self, files: list[str], parse) -> None:
        self.child: forked.Forked | None = forked.Forked(_parse_all, list(files), parse)

    def take(self) -> int:
        """Wait for the child; the number of traces it parsed (0 if it died: each job then parses its own)."""
        child, self.child = self.child, None
        if child is None:
            return 0
        ok, got = child.take()
        if not ok or not isinstance(got, list):
            return 0
        for path, ident, trace in got:
            _PARSED[path] = (ident, trace)
        return len(got)

    def close(self) -> None:
        """Stop a child whose traces are no longer wanted (the command failed before its analysis)."""
        if self.child is not None:
            self.child.close()
            self.child = None


def start(files: list[str], parse) -> Ahead | None:
    """The child parsing `files` with `parse(path) -> (identity, RankTrace)` (loader.load_identified), or None where
    no child can be made (forked.usable, a fork that fails)."""
    if not files or not forked.usable():
        return None
    try:
        return Ahead(files, parse)
    except OSError:  # no memory for the page tables, a process limit: each job parses its own
        return None


def claim(path: str, ident: str | None) -> RankTrace | None:
    """The trace of `path` parsed ahead, once, if the file still has the identity it was parsed with."""
    got = _PARSED.pop(path, None)
    if got is None or ident is None or got[0] != ident:
        return None
    return got[1]


def release() -> None:
    """Drop what no job claimed here (the jobs a forked child ran claimed theirs in its own memory)."""
    _PARSED.clear()


def _parse_all(files: list[str], parse) -> list[tuple[str, str, RankTrace]]:
    out = []
    for path in files:
        try:
            ident, trace = parse(path)
        except Exception:  # TraceError, MemoryError, a bug: its job parses it again and says what is wrong
            continue
        if ident is not None:
            out.append((path, ident, trace))
    return out
