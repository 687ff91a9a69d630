"""Typed decoding of trace events with msgspec (a dependency; loader.py falls back to orjson without it).

orjson builds a dict for every event and every args object, with every key and value; most of that is
thrown away. msgspec decodes straight into slotted structs holding only the fields llmdiag reads and skips
the rest without building it, and the columns then come out by attribute access instead of dict hashing.
Every field is typed `Any` (so values of an unexpected type cannot fail the decode; loader.py cleans them
exactly as on the dict path) and keeps the dict path's default when absent. Two choices keep the garbage
collector out of the decode: the structs are untracked (`gc=False`: they hold no cycles), and `Input Dims`,
a nested list on every shape-recording cpu_op that only gloo/c10d spans need, stays a raw byte slice
(`msgspec.Raw`) decoded on demand. A piece msgspec refuses (an event that is not an object, args that are
not an object, invalid UTF-8, malformed JSON) is handed back to orjson by the caller, so both paths give
the same columns. Without msgspec (or with LLMDIAG_PARSER=orjson), `decoder()` is None and everything goes
through orjson.
"""

from __future__ import annotations

import math
import os
from itertools import repeat
from operator import attrgetter, is_, is_not
from typing import Any, Optional, Union

try:
    import msgspec
except ImportError:  # optional: `pip install msgspec` for the faster path
    msgspec = None
if os.environ.get("LLMDIAG_PARSER", "").lower() == "orjson":  # force the dict path (benchmarks, debugging)
    msgspec = None

# JSON key -> (attribute, default when absent); defaults match columns.py's dict path.
ARG_FIELDS = {
    "stream": ("stream", -1), "correlation": ("correlation", -1), "External id": ("ext", -1),
    "Device Type": ("device_type", -1), "Device Id": ("device_id", -1), "Total Allocated": ("allocated", -1),
    "Total Reserved": ("reserved", -1), "Bytes": ("nbytes", -1), "name": ("name", ""),
    # cuda_sync events: the stream and the cudaEventRecord a stream/event wait is on (metrics/rank/critical_path)
    "wait_on_stream": ("wstream", -1), "wait_on_cuda_event_record_corr_id": ("wcorr", -1),
    "bytes": ("cbytes", -1),  # a device copy's size (device-to-host ones kept: io/columns.py _read_bytes)
}
COMM_FIELDS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
               "Process Group Description", "Process Group Ranks", "Seq", "seq", "In split size", "Out split size",
               "Src Rank", "Dst Rank", "Concrete Inputs", "Input type", "Input Dims")
# Lists on every shape-recording cpu_op, needed only for the few ops kept (gloo/c10d spans: Input Dims; gloo
# all-to-alls: Concrete Inputs, their split sizes; GEMM ops: Input type, their precision, and Input Dims): kept as raw byte
# slices and decoded on demand.
RAW_FIELDS = ("Concrete Inputs", "Input type", "Input Dims")
# The Chrome trace format's other phases (duration B/E, instant I, counter C, async b/n/e, flow s/t/f, sample P,
# object N/O/D, metadata V/v, mark R, clock sync c, context ( and )): read by nothing, decoded as empty structs.
SKIPPED_PHASES = "BEICbnestfPNODVvRc()"
EVENT_FIELDS = {"ph": None, "name": "", "cat": "", "pid": None, "tid": None, "ts": None, "dur": math.nan}
_COMM_ATTRS = [(k, f"c{i}") for i, k in enumerate(COMM_FIELDS)]
assert COMM_FIELDS[-len(RAW_FIELDS):] == RAW_FIELDS  # StructView.comm decodes these last values on demand
_COMM_GET = attrgetter(*(a for _, a in _COMM_ATTRS))
_COMM_CACHE: dict = {}
_GEMM_CACHE: dict = {}
_INPUT_TYPE = dict(_COMM_ATTRS)["Input type"]
_INPUT_DIMS = dict(_COMM_ATTRS)["Input Dims"]

if msgspec is not None:
    UNSET = msgspec.UNSET
    Args = msgspec.defstruct(
        "Args",
        [(a, Any, msgspec.field(default=d, name=k)) for k, (a, d) in ARG_FIELDS.items()]
        + [(a, msgspec.Raw if k in RAW_FIELDS else Any, msgspec.field(default=UNSET, name=k))
           for k, a in _COMM_ATTRS],
        gc=False,
    )
    _FIELDS = [(k, Any, d) for k, d in EVENT_FIELDS.items() if k != "ph"] + [("args", Optional[Args], None)]
    # The phase is the union's tag: complete, metadata and instant events (the only ones the loader reads)
    # decode into structs with fields; every other phase (flows, ~40% of a Kineto trace's events, counters,
    # async spans) into an empty struct, its fields skipped unbuilt. An unknown or missing phase makes msgspec
    # refuse the piece, and orjson's dict path (which ignores those events too) gives the same columns.
    Event = msgspec.defstruct("Event", _FIELDS, gc=False, tag_field="ph", tag="X")
    _READ = {"X": Event, "M": msgspec.defstruct("Meta", _FIELDS, gc=False, tag_field="ph", tag="M"),
             "i": msgspec.defstruct("Instant", _FIELDS, gc=False, tag_field="ph", tag="i")}
    _SKIPPED = {p: msgspec.defstruct(f"Skipped_{ord(p)}", [], gc=False, tag_field="ph", tag=p) for p in SKIPPED_PHASES}
    PHASE = {cls: p for p, cls in {**_READ, **_SKIPPED}.items()}  # struct type -> its `ph`
    NO_ARGS = Args()
    _DECODER = msgspec.json.Decoder(list[Union[tuple(PHASE)]])
    # what msgspec may raise on a piece it refuses (UnicodeDecodeError, for invalid UTF-8, is a ValueError)
    ERRORS: tuple = (msgspec.MsgspecError, ValueError, OverflowError, RecursionError)
else:
    UNSET = Args = Event = NO_ARGS = _DECODER = None
    PHASE = {}
    ERRORS = ()


def _raw_value(raw):
    """A msgspec.Raw slice decoded; a value that will not decode stays absent, like a malformed arg."""
    try:
        return msgspec.json.decode(raw)
    except ERRORS:
        return UNSET


def decoder():
    """bytes -> list of event structs, one type per phase (raising on anything unusual), or None without msgspec."""
    return _DECODER.decode if _DECODER is not None else None


def is_struct_list(events: list) -> bool:
    return bool(events) and type(events[0]) in PHASE


class StructView:
    """Column access over Event structs, with the interface of columns.py's dict view."""

    PHASE = {p: cls for cls, p in PHASE.items() if p in "XMi"}  # the phases read, as their struct types
    same = staticmethod(is_)

    @staticmethod
    def phases(rows: list) -> list:
        """Each event's phase as its struct type: compared by identity, no tag string looked up per event."""
        return list(map(type, rows))

    @staticmethod
    def field(rows: list, key: str, default=None) -> list:
        if key == "ph":  # the union's tag: the struct's type says it
            return list(map(PHASE.__getitem__, map(type, rows)))
        return list(map(attrgetter(key), rows))

    @staticmethod
    def args(rows: list) -> list:
        args = list(map(attrgetter("args"), rows))
        if None in args:  # absent or null args
            args = [NO_ARGS if a is None else a for a in args]
        return args

    @staticmethod
    def arg(args: list, key: str) -> list:
        return list(map(attrgetter(ARG_FIELDS[key][0]), args))

    @staticmethod
    def has(args: list, key: str) -> list:
        return list(map(is_not, map(attrgetter(f"c{COMM_FIELDS.index(key)}"), args), repeat(UNSET)))

    @staticmethod
    def comm(a) -> dict:
        """The collective args present; equal args share one dict (read-only downstream)."""
        values = _COMM_GET(a)
        n = len(RAW_FIELDS)
        if any(v is not UNSET for v in values[-n:]):  # kept raw by the decoder (only a few ops need them)
            values = values[:-n] + tuple(v if v is UNSET else _raw_value(v) for v in values[-n:])
        try:
            return _COMM_CACHE[values]
        except KeyError:
            pass
        except TypeError:  # a list value (Input Dims): not shareable
            return {k: v for (k, _), v in zip(_COMM_ATTRS, values) if v is not UNSET}
        if len(_COMM_CACHE) > 50_000:
            _COMM_CACHE.clear()
        d = _COMM_CACHE[values] = {k: v for (k, _), v in zip(_COMM_ATTRS, values) if v is not UNSET}
        return d

    @staticmethod
    def gemm(a) -> dict | None:
        """{"Input type": [...], "Input Dims": [...]} of a GEMM op, decoded once per distinct raw pair (a
        model has few GEMM shapes)."""
        raw, rdims = getattr(a, _INPUT_TYPE), getattr(a, _INPUT_DIMS)
        if raw is UNSET:
            return None
        key = (bytes(raw), None if rdims is UNSET else bytes(rdims))
        d = _GEMM_CACHE.get(key)
        if d is None:
            v = _raw_value(raw)
            dims = None if rdims is UNSET else _raw_value(rdims)
            if len(_GEMM_CACHE) > 10_000:
                _GEMM_CACHE.clear()
            d = _GEMM_CACHE[key] = ({"Input type": v, "Input Dims": dims} if isinstance(dims, list) else
                                    {"Input type": v}) if isinstance(v, list) else {}
        return d or None

    @staticmethod
    def get(e, key: str, default=None):
        if key == "ph":
            return PHASE[type(e)]
        return getattr(e, key) if key in EVENT_FIELDS else default
