"""One large trace parsed by several processes: the way a single huge rank uses every core.

This process inflates the file and cuts the events array into pieces at `},` boundaries without parsing
them (tracestream.Stream in raw mode); forked helpers decode each piece into columns with their own
name/category/thread tables, and this process merges the pieces back in file order, renumbering the ids
into one table, so the result equals loader.py's serial parse exactly. At most a few pieces per helper
are in flight, so memory stays bounded as in the serial stream. A cut that fell inside a string (the
piece does not parse), malformed JSON, or a layout the stream does not follow returns None: the caller
parses the file serially, which is also what reports the error.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from llmdiag.diagnose.io import fastjson
from llmdiag.diagnose.io.columns import Columns, intern
from llmdiag.diagnose.io.stream import Malformed, Stream, Whole

IN_FLIGHT_PER_HELPER = 3  # pieces queued per helper: enough to keep it busy, few enough to bound memory


class _BadPiece(Exception):
    """A piece that does not parse on its own: give up the split and parse serially."""


def _decode(piece: bytes) -> dict:
    """Columns of one piece, with the piece's own tables (runs in a helper)."""
    s = Stream("", fastjson.decoder(), fastjson.ERRORS)
    events = None
    if s.fast is not None:
        try:
            events = s.fast(piece)
        except s.fast_errors:
            pass  # anything unusual: orjson decides, as in the serial stream
    if events is None:
        try:
            events = s.loads(piece)
        except ValueError:  # orjson.JSONDecodeError: the cut fell inside a string, or malformed JSON
            raise _BadPiece from None
    if not isinstance(events, list):
        raise _BadPiece
    cols = Columns()
    cols.add(events)
    return {"names": list(cols.names), "cats": list(cols.cats), "threads": list(cols.threads),
            "thread_names": cols.thread_names, "parts": cols.parts, "mem_parts": cols.mem_parts,
            "comm_args": cols.comm_args, "n": cols.n, "bad": cols.bad, "replaced": s.replaced}


def _merge(cols, piece: dict) -> None:
    """Append one piece's columns to `cols`, its local ids renumbered into cols' tables."""
    names = intern(cols.names, piece["names"]) if piece["names"] else np.zeros(0, np.int32)
    cats = intern(cols.cats, piece["cats"]) if piece["cats"] else np.zeros(0, np.int32)
    threads = intern(cols.threads, piece["threads"]) if piece["threads"] else np.zeros(0, np.int32)
    for part in piece["parts"]:
        part["name"], part["cat"], part["thread"] = names[part["name"]], cats[part["cat"]], threads[part["thread"]]
        cols.parts.append(part)
    for part in piece["mem_parts"]:
        part["thread"] = threads[part["thread"]]
        cols.mem_parts.append(part)
    cols.thread_names.update(piece["thread_names"])
    cols.comm_args.update({cols.n + i: a for i, a in piece["comm_args"].items()})
    cols.n += piece["n"]
    cols.bad += piece["bad"]


def parse_split(path: str, helpers: int):
    """(columns, header, decompressed bytes, U+FFFD replacements) of `path`, or None: parse it serially."""
    stream = Stream(path, raw=True)
    cols, replaced = Columns(), 0
    pending: deque = deque()
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    try:
        with ProcessPoolExecutor(helpers, mp_context=ctx) as ex:
            try:
                for piece in stream.pieces():
                    if not piece:  # the empty array at the end
                        continue
                    pending.append(ex.submit(_decode, piece))
                    del piece
                    while len(pending) >= helpers * IN_FLIGHT_PER_HELPER:
                        replaced += _take(cols, pending.popleft())
                while pending:
                    replaced += _take(cols, pending.popleft())
            except BaseException:
                for f in pending:
                    f.cancel()
                raise
    except (Whole, Malformed, _BadPiece, BrokenProcessPool, OSError):  # OSError: no fork (memory, limits)
        return None
    header = stream.header if isinstance(stream.header, dict) else {}
    return cols, header, stream.nbytes, replaced + stream.replaced  # the helpers' pieces and this header


def _take(cols, fut) -> int:
    piece = fut.result()
    _merge(cols, piece)
    return piece["replaced"]
