"""A trace file's bytes -> its `traceEvents`, piece by piece, in bounded memory (used by loader.py).

The file is inflated as a stream (gzip, gzip of gzip, multi-member, or plain) into one bytearray, and the
events array is cut at event boundaries into pieces of about CHUNK_BYTES, each parsed on its own (by the
optional typed decoder of fastjson.py, else orjson) in place, with no copy: neither the whole decompressed
text nor a list of dicts for the whole trace ever exists, and small pieces stay in cache. A cut is tried
after the last `},` within CHUNK_BYTES; a piece that does not parse means the cut fell inside a string or
nested object, and the `},` before it is tried. The header (every top-level key but
traceEvents, before or after the array) is parsed at the end with an empty array in place of the events.
A layout the stream cannot follow (no top-level `"traceEvents": [` in the first HEAD_LIMIT bytes, say)
raises Whole: the caller parses the file whole, as before. Invalid UTF-8 (names cut inside a multi-byte
character) becomes U+FFFD and is counted in `replaced`. (A read-ahead thread inflating on another core was
tried and dropped: the GIL hand-offs it needs per block ate the overlap on this workload.)
"""

from __future__ import annotations

import math
import re
import zlib
from functools import partial
from itertools import chain

import orjson

from llmdiag.diagnose.errors import TraceError
from llmdiag.diagnose.model.lazy_re import lazy_compile

try:  # ISA-L inflates gzip about twice as fast as zlib: a tenth of a rank's analysis time
    from isal import isal_zlib as _zlib
except ImportError:  # an optional speed-up (a wheel for common platforms); zlib gives the same bytes
    _zlib = zlib
_ZLIB_ERRORS = (zlib.error, _zlib.error)

# Decompressed bytes parsed at a time: small pieces stay in cache and keep memory low. 512 kB rather than 1 MB:
# a piece's structs and buffers then come from memory malloc reuses instead of fresh pages (a 10 MB trace's
# first analysis took ~6,000 page faults at 1 MB, ~3,600 at 512 kB): 6-19% less CPU on three of the four
# small real fixtures, +3% on the fourth (min of 6 fresh runs each), none lost on a 100 MB trace.
CHUNK_BYTES = 1 << 19
RAW_CHUNK_FACTOR = 8  # raw pieces (split_parse.py) are this many CHUNK_BYTES (4 MB: few hand-offs per worker)
READ_BYTES = 1 << 20  # compressed bytes read at a time
HEAD_LIMIT = 64 << 20  # `"traceEvents": [` must start within this many bytes, or the file is parsed whole
NO_CUT_LIMIT = 64 << 20  # this much text without an event boundary is malformed, not one huge event
WHOLE_BYTES = 512 << 20  # the whole-file fallback inflates at most this much (it parses into dicts: ~10x)
WHOLE_LIMIT = 256 << 20  # malformed JSON in a file up to this size is re-parsed whole, for orjson's message
_GZ = b"\x1f\x8b"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = lazy_compile(rb"\}\s+,")
GZ_HINT = "the file was cut off or damaged; re-copy it"
JSON_HINT = "the trace was cut off or is not JSON; re-export it"


class Whole(Exception):
    """The stream cannot follow this file's layout: parse it whole."""


class Malformed(Exception):
    """Malformed JSON met while streaming; worth re-parsing whole (for orjson's message) when `size` is small."""

    def __init__(self, what: str, size: float = math.inf):
        super().__init__(what)
        self.size = size


def _open(path: str):
    try:
        return open(path, "rb")
    except PermissionError:
        raise TraceError("permission denied", path, "make the file readable") from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a trace file", path) from None
    except OSError as e:
        raise TraceError(f"cannot read: {e.strerror or e}", path) from None


def _read(f, path: str, n: int = -1) -> bytes:
    try:
        return f.read(n)
    except OSError as e:
        raise TraceError(f"cannot read: {e.strerror or e}", path) from None


def read_bytes(path: str, budget: int | None = None) -> bytearray:
    """The decompressed JSON bytes of a trace file (gzip, gzip of gzip, or plain), inflated as a stream
    within `budget` bytes (WHOLE_BYTES): a small file that inflates to GBs (a bomb, or megabytes of leading
    whitespace) is refused instead of filling memory. Leading whitespace is dropped as it streams."""
    budget = WHOLE_BYTES if budget is None else budget
    out = bytearray()
    src = blocks(path)
    try:
        for b in src:
            if not out:
                b = b.lstrip()
            if len(out) + len(b) > budget:
                raise TraceError(f"too large to parse whole (over {budget >> 20} MB decompressed, and its layout "
                                 "cannot be streamed)", path, JSON_HINT)
            out += b
    finally:
        src.close()
    if not out:  # leading whitespace was dropped as it streamed: empty means blank
        raise TraceError("empty file", path, "the rank probably died before writing its trace")
    return out  # a bytearray (bytes-like: orjson and re read it), not copied to bytes: half the peak


def _gunzip(src, path: str):
    """Inflate a stream of gzip members (zero padding between them allowed, as gzip.decompress does)."""
    d, pending = _zlib.decompressobj(31), b""
    for data in src:
        if pending:
            data, pending = pending + data, b""
        while data:
            if d is None:  # after a member: zero padding, or another member
                data = data.lstrip(b"\0")
                if len(data) < 2:
                    pending = data
                    break
                if data[:2] != _GZ:
                    raise TraceError("corrupt gzip data (Not a gzipped file)", path, GZ_HINT)
                d = _zlib.decompressobj(31)
            try:
                out = d.decompress(data, CHUNK_BYTES)
            except _ZLIB_ERRORS as e:
                raise TraceError(f"corrupt gzip data ({e})", path, GZ_HINT) from None
            if out:
                yield out
            data, d = (d.unused_data, None) if d.eof else (d.unconsumed_tail, d)
    if pending or (d is not None and not d.eof):
        raise TraceError("corrupt gzip data (Compressed file ended before the end-of-stream marker was reached)",
                         path, GZ_HINT)


def _peek(src):
    first = b""
    for b in src:
        first += b
        if len(first) >= 2:
            break
    return first, chain((first,), src)


def blocks(path: str):
    """Decompressed blocks of a trace file."""
    with _open(path) as f:
        src = iter(partial(_read, f, path, READ_BYTES), b"")
        for _ in range(3):
            head, src = _peek(src)
            if head[:2] != _GZ:
                break
            src = _gunzip(src, path)
        yield from src


def _duplicate_key(doc: bytes, key: str = "traceEvents") -> bool:
    """Whether the top-level object of `doc` names `key` twice (orjson silently keeps the last)."""
    import json

    top: list = []

    def pairs(kv):
        top[:] = [k for k, _ in kv]  # the last object closed is the top level
        return {}

    try:
        json.loads(doc, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return False
    return top.count(key) > 1


class Stream:
    """One file's events, piece by piece (`pieces()`), then `header`, `nbytes` and `replaced`."""

    def __init__(self, path: str, fast=None, fast_errors: tuple = (), raw: bool = False):
        self.path = path
        self.fast, self.fast_errors = fast, fast_errors  # an optional typed decoder (fastjson.py)
        self.header: dict = {}
        self.nbytes = 0
        self.replaced = 0  # invalid UTF-8 sequences replaced by U+FFFD
        self.raw = raw  # pieces as bytes, cut at the last boundary without parsing (split_parse.py)
        # Raw pieces travel to another process: larger ones keep the per-piece costs there small.
        self.chunk = CHUNK_BYTES * (RAW_CHUNK_FACTOR if raw else 1)

    def loads(self, data):
        """orjson.loads; invalid UTF-8 is replaced by U+FFFD (and counted) rather than fatal."""
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            if "UTF-8" not in str(e):
                raise
        raw = bytes(data)
        text = raw.decode("utf-8", "replace")
        self.replaced += text.count("\ufffd") - raw.count("\ufffd".encode())
        return orjson.loads(text)

    def _array(self, buf: bytearray, stop: int, start: int = 0):
        """buf[start:stop] (a `[` and events separated by commas) parsed as one JSON array, in place: the byte
        at `stop` becomes `]` for the parse (no copy of the piece), then is put back. In raw mode, the
        piece's bytes with that `]`, unparsed."""
        if self.raw:
            with memoryview(buf) as whole, whole[start:stop] as piece:
                return b"".join((piece, b"]"))  # one copy
        saved, buf[stop] = buf[stop], 0x5D
        try:
            with memoryview(buf) as whole, whole[start : stop + 1] as piece:
                if self.fast is not None:
                    try:
                        return self.fast(bytes(piece))  # a copy: the structs' Raw fields point into it
                    except self.fast_errors:
                        pass  # anything unusual: orjson decides (a bad cut, invalid UTF-8, odd values)
                return self.loads(piece)
        finally:
            buf[stop] = saved

    def pieces(self):
        """Lists of events of about CHUNK_BYTES each. Raises Whole or Malformed (see the module doc)."""
        src = blocks(self.path)
        try:
            head, m = b"", None
            for b in src:
                head += b
                lead = head.lstrip()[:1]
                if not lead:
                    head = b""  # leading whitespace is dropped as it streams: megabytes of it cost nothing
                    continue
                if lead == b"[":  # a bare Chrome trace array
                    break
                if lead not in (b"", b"{") or len(head) > HEAD_LIMIT:
                    raise Whole
                if m := _KEY.search(head):
                    break
            else:
                raise Whole  # no traceEvents, or empty: the whole path says which
            start = m.end() if m else head.index(b"[") + 1
            prefix = head[: start - 1] if m else None
            buf = bytearray(head[start - 1 :])  # `[` and the events not parsed yet: each byte is copied once
            total = len(head)
            del head
            for b in src:
                buf += b
                total += len(b)
                at = 0  # buf[at] is the `[` opening the next piece
                while len(buf) - at >= self.chunk:
                    cut, events = self._cut(buf, at)
                    if not cut:
                        break
                    yield events
                    del events
                    at = cut - 1  # the comma after the piece's last event becomes the next piece's `[`
                    buf[at] = 0x5B
                if at:
                    del buf[:at]  # from the front: CPython moves the start, copies nothing
                if len(buf) > NO_CUT_LIMIT:  # events are small: no boundary in 64 MB means broken JSON
                    raise Malformed(f"invalid JSON inside traceEvents (no event boundary in the "
                                    f"{len(buf) >> 20} MB before byte {total})")
            self.nbytes = total
            try:
                events, self.header = self._finish(prefix, buf)
            except Malformed as e:
                e.size = total
                raise
            yield events
        finally:
            src.close()

    def _cut(self, buf: bytearray, at: int) -> tuple[int, list]:
        """Events of buf[at:] up to the last event boundary within self.chunk (else within all of it), and
        where the rest starts (0: no boundary parses)."""
        for end in (at + self.chunk, len(buf)):
            for stop, rest in self._boundaries(buf, at, end, 64 if self.raw else 4):  # raw: no parse per try
                if self.raw and bytes(buf[rest : rest + 64]).lstrip()[:1] != b"{":
                    continue  # unparsed, so at least an object must follow (kernel names hold `}, `)
                try:
                    return rest, self._array(buf, stop, at)
                except orjson.JSONDecodeError:
                    pass  # a `},` inside a string or nested object: try the one before
        return 0, []  # keep the bytes; the next cut or the end takes them

    @staticmethod
    def _boundaries(buf: bytearray, at: int, end: int, tries: int = 4):
        """(end of an event, start of the next) in buf[at:end], last first: `},` (any writer without spaces
        there), else `}` whitespace `,` near the end."""
        found = False
        for _ in range(tries):
            pos = buf.rfind(b"},", at, end)
            if pos < 0:
                break
            found, end = True, pos
            yield pos + 1, pos + 2
        if not found:
            for m in list(_SEP.finditer(buf, max(at, end - max(2 * CHUNK_BYTES, 1 << 16)), end))[-tries:][::-1]:
                yield m.start() + 1, m.end()

    def _finish(self, prefix: bytes | None, buf: bytearray) -> tuple[list, dict]:
        """The last events, and the header: the `]` closing traceEvents is the last one after which it parses."""
        end, error = len(buf), "truncated JSON (the traceEvents array is not closed)"
        for _ in range(64):
            q = buf.rfind(b"]", 1, end)
            if q < 0:
                break
            end = q
            before = bytes(buf[max(1, q - 64) : q]).rstrip()
            if before[-1:] != b"}" and (q > 64 or before):
                continue  # the array ends after an event, or is empty
            header: dict = {}
            if prefix is not None:
                try:
                    header = self.loads(prefix + b"[]" + bytes(buf[q + 1 :]))
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(header, dict) or header.get("traceEvents") != []:
                    if isinstance(header, dict) and _duplicate_key(prefix + b"[]" + bytes(buf[q + 1 :])):
                        raise TraceError("two top-level traceEvents arrays (a duplicate key): which one is meant "
                                         "cannot be told; left out", self.path, "export the trace again")
                    raise Whole  # the key was not the top level's
                del header["traceEvents"]
            elif bytes(buf[q + 1 :]).strip():
                continue
            try:
                return (self._array(buf, q) if before else []), header
            except orjson.JSONDecodeError as e:
                error = f"invalid JSON inside traceEvents ({e})"
        raise Malformed(error)

    def whole(self) -> tuple[dict, list]:
        """Header and events of the file parsed at once (for layouts the stream does not follow)."""
        raw = read_bytes(self.path)
        self.nbytes = len(raw)
        try:
            doc = self.loads(raw)
        except orjson.JSONDecodeError as e:
            low = str(e).lower()
            what = "truncated JSON" if "unexpected end" in low or "eof" in low else "invalid JSON"
            raise TraceError(f"{what} ({e})", self.path, JSON_HINT) from None
        del raw
        if isinstance(doc, list):  # bare Chrome trace array
            return {}, doc
        if not isinstance(doc, dict):
            raise TraceError("not a Kineto trace (top level is not an object)", self.path)
        events = doc.pop("traceEvents", None)
        if events is None:
            raise TraceError("not a Kineto trace (no traceEvents)", self.path,
                             "expected torch.profiler's Chrome trace export")
        if not isinstance(events, list):
            raise TraceError("traceEvents is not a list", self.path)
        return doc, events
