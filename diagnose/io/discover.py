"""Finds the trace files under a path and the manifest of a run folder.

Accepted: an llmdiag run folder (manifest.json + traces/), any folder of Kineto traces at any depth
(`.json`, `.json.gz`; torchtitan's `iteration_N/rank<R>_trace.json`, `*.pt.trace.json.gz`, HTA's layout),
or single files. Symlinked directories are not followed (no loops). Ranks are resolved later, from each
trace's distributedInfo first; the file name is only the last resort.
"""

from __future__ import annotations

import os
import re

import orjson

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.depth import MAX_DEPTH, too_deep
from llmdiag.diagnose.model.files import MANIFEST_BUDGET, guard_input, read_bounded, special

TRACE_SUFFIXES = (".json", ".json.gz", ".json.gzip")
NOT_TRACES = {"manifest.json", "summary.json", "baseline.json"}
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)


@dataclass
class Source:
    """What one input path resolved to: the trace files to read, a manifest where there is one, what was skipped."""

    path: str  # what the user gave
    name: str  # a short name for outputs
    files: list[str]
    manifest: dict | None
    run_folder: bool  # an llmdiag run folder (the report goes inside it)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): trace-named entries not read


def discover(paths) -> Source:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]  # pathlib.Path from the Python API
    files: list[str] = []
    skipped: list[tuple[str, str]] = []
    manifest = None
    run_folder = False
    for p in paths:
        if not os.path.exists(p):
            if os.path.islink(p):
                raise LlmdiagError("broken symbolic link", p)
            raise LlmdiagError("no such file or directory", p)
        if os.path.isdir(p):
            m = os.path.join(p, "manifest.json")
            if os.path.isfile(m):
                manifest = read_manifest(m)
                run_folder = True
            files += _walk(p, skipped)
        elif (why := special(p)) is not None:
            raise LlmdiagError(f"not a regular file ({why})", p, "give a trace file or a folder of traces")
        else:
            files.append(p)
    if not files and skipped:
        raise LlmdiagError(f"no readable trace files; {len(skipped)} skipped, first: {skipped[0][0]} ({skipped[0][1]})",
                           paths[0])
    if not files:
        what, hint = _no_traces(manifest)
        raise LlmdiagError(what, paths[0], hint)
    for f in files:  # an output naming one of them is refused (model/files.py open_atomic)
        guard_input(f)
    first = os.path.abspath(paths[0]).rstrip(os.sep)
    name = os.path.basename(first)
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return Source(paths[0], name or "traces", sorted(dict.fromkeys(files)), manifest, run_folder, skipped)


def _no_traces(manifest: dict | None) -> tuple[str, str]:
    """Why a folder holds no trace, where its manifest says: a run stopped (Ctrl-C, a rank that failed) before
    any rank wrote one, or one still running (or whose launcher was killed) is not a folder of the wrong files.
    The manifest's words are untrusted: LlmdiagError prints them escaped; cut to one short clause here."""
    what, hint = "no trace files found", "expected *.json or *.json.gz Kineto traces"
    if not isinstance(manifest, dict):
        return what, hint
    failure, status = manifest.get("failure"), manifest.get("status")
    reason = failure.get("reason") if isinstance(failure, dict) else None
    if isinstance(reason, str) and reason.strip():
        return (f"{what}: the run stopped before any rank wrote its trace ({reason.strip()[:200]})",
                "its logs/ folder holds each rank's output; run it again")
    if status == "running":
        return (f"{what}: the manifest says the run is still running (or its launcher was killed before any "
                "rank wrote a trace)", "analyze it once it has finished")
    return what, hint


def _walk(root: str, skipped: list[tuple[str, str]] | None = None) -> list[str]:
    out = []
    seen = set()
    def unreadable(e: OSError) -> None:  # the top folder is the user's input; a sub-folder is one left-out input
        if os.path.abspath(e.filename or root) == os.path.abspath(root) or skipped is None:
            _walk_error(e)
        skipped.append((e.filename, f"an unreadable folder: {e.strerror or e}"))

    for d, dirs, names in os.walk(root, followlinks=False, onerror=unreadable):
        real = os.path.realpath(d)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(x for x in dirs if x not in ("results", "logs", "llmdiag-report", "__pycache__"))
        for n in sorted(names):
            if n in NOT_TRACES or not n.endswith(TRACE_SUFFIXES):
                continue
            path = os.path.join(d, n)
            why = special(path)
            if why is None:
                out.append(path)
            elif why != "a directory" and skipped is not None:  # symlinked folders are not followed, silently
                skipped.append((path, why))
    return out


def _walk_error(e: OSError) -> None:
    raise LlmdiagError(f"cannot list directory: {e.strerror}", e.filename)


def read_manifest(path: str) -> dict | None:
    raw = read_bounded(path, MANIFEST_BUDGET, "manifest", gunzip=False)  # a FIFO or a huge file: one line
    try:
        m = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise LlmdiagError(f"unreadable manifest ({e})", path, "analyze the traces folder instead") from None
    if not isinstance(m, dict):
        raise LlmdiagError("manifest is not a JSON object", path)
    if too_deep(m):  # kept in the summary: its writers would recurse past Python's limit
        raise LlmdiagError(f"invalid manifest: it nests deeper than {MAX_DEPTH} levels", path)
    return m


def rank_from_name(path: str) -> int | None:
    """rank<R> / rank-<R> / rank_<R> in the file name (not the directory: folders rarely mean ranks)."""
    m = RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m else None



def run_folders(root: str, files: list[str]) -> dict[str, str]:
    """file -> the llmdiag run folder (a folder holding manifest.json) nearest above it, below `root`: a folder of
    several run folders (`runs/`) keeps each run's manifest, and each run its name (issue 36: a run analysed out
    of `runs/` was named `runs-run4` and read without its manifest). Files under no such folder are left out."""
    top = os.path.abspath(root)
    seen: dict[str, str | None] = {}
    out = {}
    for f in files:
        d = os.path.dirname(os.path.abspath(f))
        walked = []
        found = None
        while d.startswith(top + os.sep):
            if d in seen:
                found = seen[d]
                break
            walked.append(d)
            if os.path.isfile(os.path.join(d, "manifest.json")):
                found = d
                break
            d = os.path.dirname(d)
        for w in walked:
            seen[w] = found
        if found:
            out[f] = found
    return out


def file_size(path: str) -> int:
    """A trace file's size on disk (0 where it cannot be read: its parse then says why), what the engine schedules
    and the command sizes its parse ahead by."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
