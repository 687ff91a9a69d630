"""Kineto JSON (plain, gzip, gzip twice) -> RankTrace columns.

Speed and memory come from three choices: orjson, a parse in chunks of the `traceEvents` array (so a
1 GB trace never exists as one list of dicts), and column extraction by list comprehensions per field
instead of a per-event loop. Any malformed input raises TraceError naming the file and the problem.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib

import numpy as np
import orjson

from diagnose.errors import TraceError
from diagnose.trace import MemoryEvents, RankTrace

CHUNK_BYTES = 48 << 20  # events are parsed this many bytes at a time
_EMPTY: dict = {}
# The 2021 schema (kineto's TensorBoard samples) used capitalised categories.
_CAT_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "python_function": "python_function",
}
_COMM_ARG_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Seq",
    "seq",
)


def read_bytes(path: str) -> bytes:
    """The decompressed JSON bytes of a trace file (gzip, gzip of gzip, or plain)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except PermissionError:
        raise TraceError("permission denied", path, "make the file readable") from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a trace file", path) from None
    except OSError as e:
        raise TraceError(f"cannot read: {e.strerror or e}", path) from None
    for _ in range(3):  # gzip, possibly gzipped again by a careless upload
        if raw[:2] != b"\x1f\x8b":
            break
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(f"corrupt gzip data ({e})", path, "the file was cut off or damaged; re-copy it") from None
    if not raw.strip():
        raise TraceError("empty file", path, "the rank probably died before writing its trace")
    return raw


def _loads(data: bytes, path: str):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        what = "truncated JSON" if "unexpected end" in str(e).lower() or "eof" in str(e).lower() else "invalid JSON"
        raise TraceError(f"{what} ({e})", path, "the trace was cut off or is not JSON; re-export it") from None


def _split_events(raw: bytes, path: str) -> tuple[dict, list[bytes]]:
    """Header object and the traceEvents array cut into independently parseable pieces.

    A cut is tried after a `}` + `,` at an event boundary; a piece that does not parse on its own means the
    cut fell inside a nested object or a string, and the cut moves on. Small files are one piece.
    """
    key = raw.find(b'"traceEvents"')
    if key < 0 or len(raw) < 2 * CHUNK_BYTES:
        return {}, []
    start = raw.find(b"[", key)
    end = raw.rfind(b"]")
    if start < 0 or end < start:
        return {}, []
    # Header: everything but the array, parsed with an empty array in its place.
    tail = raw[end + 1 :]
    header = _loads(raw[:start] + b"[]" + tail, path) if tail.strip() else None
    if not isinstance(header, dict):
        return {}, []  # unusual layout: fall back to parsing everything at once
    pieces, pos, body_end = [], start + 1, end
    while pos < body_end:
        cut = body_end if body_end - pos <= CHUNK_BYTES else raw.find(b"},", pos + CHUNK_BYTES, body_end)
        while True:
            if cut < 0 or cut >= body_end:
                cut = body_end
                piece = raw[pos:cut]
            else:
                piece = raw[pos : cut + 1]
            try:
                events = orjson.loads(b"[" + piece + b"]")
            except orjson.JSONDecodeError:
                if cut >= body_end:
                    raise TraceError("invalid JSON inside traceEvents", path, "re-export the trace") from None
                cut = raw.find(b"},", cut + 2, body_end)
                continue
            pieces.append(events)
            break
        pos = cut + 2 if cut < body_end else body_end
    return header, pieces


def _events_and_header(raw: bytes, path: str) -> tuple[dict, list[list]]:
    header, pieces = _split_events(raw, path)
    if pieces:
        return header, pieces
    doc = _loads(raw, path)
    if isinstance(doc, list):  # bare Chrome trace array
        return {}, [doc]
    if not isinstance(doc, dict):
        raise TraceError("not a Kineto trace (top level is not an object)", path)
    events = doc.pop("traceEvents", None)
    if events is None:
        raise TraceError("not a Kineto trace (no traceEvents)", path, "expected torch.profiler's Chrome trace export")
    if not isinstance(events, list):
        raise TraceError("traceEvents is not a list", path)
    return doc, [events]


class _Interner:
    def __init__(self):
        self.index: dict = {}
        self.values: list = []

    def ids(self, keys: list) -> np.ndarray:
        index, values = self.index, self.values
        out = np.empty(len(keys), np.int32)
        for i, k in enumerate(keys):
            j = index.get(k)
            if j is None:
                j = index[k] = len(values)
                values.append(k)
            out[i] = j
        return out


def _num(v, default: float = math.nan) -> float:
    if isinstance(v, bool):
        return default
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return default
    return default


def _intarg(args: list, key: str) -> np.ndarray:
    vals = [a.get(key, -1) for a in args]
    try:
        return np.array(vals, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([int(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**62 else -1 for v in vals], np.int64)


def _floats(vals: list) -> np.ndarray:
    try:
        return np.array(vals, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_num(v) for v in vals], dtype=np.float64)


class _Columns:
    """Accumulates columns over event pieces."""

    def __init__(self):
        self.names, self.cats, self.threads = _Interner(), _Interner(), _Interner()
        self.thread_names: dict = {}
        self.parts: list[dict] = []
        self.mem_parts: list[dict] = []
        self.comm_args: dict[int, dict] = {}
        self.n = 0
        self.bad = 0

    def add(self, events: list) -> None:
        ph = [e.get("ph") if type(e) is dict else None for e in events]
        X = [e for e, p in zip(events, ph) if p == "X"]
        self.bad += sum(1 for e in events if type(e) is not dict)
        for e, p in zip(events, ph):
            if p == "M" and e.get("name") == "thread_name":
                a = e.get("args") if isinstance(e.get("args"), dict) else _EMPTY
                key = (_hashable(e.get("pid")), _hashable(e.get("tid")))
                self.thread_names[key] = str(a.get("name", ""))
        mem = [e for e, p in zip(events, ph) if p == "i" and e.get("name") == "[memory]"]
        if mem:
            self._add_memory(mem)
        if not X:
            return
        args = [a if type(a) is dict else _EMPTY for a in (e.get("args") for e in X)]
        names = [e.get("name", "") for e in X]
        try:
            name_ids = self.names.ids(names)
        except TypeError:  # unhashable name: hostile or broken trace
            name_ids = self.names.ids([n if isinstance(n, str) else str(n) for n in names])
        cats = [e.get("cat", "") for e in X]
        try:
            cat_ids = self.cats.ids(cats)
        except TypeError:
            cat_ids = self.cats.ids([c if isinstance(c, str) else str(c) for c in cats])
        thread_ids = self.threads.ids([(_hashable(e.get("pid")), _hashable(e.get("tid"))) for e in X])
        part = {
            "ts": _floats([e.get("ts") for e in X]),
            "dur": _floats([e.get("dur", math.nan) for e in X]),
            "name": name_ids,
            "cat": cat_ids,
            "thread": thread_ids,
            "stream": _intarg(args, "stream"),
            "corr": _intarg(args, "correlation"),
            "ext": _intarg(args, "External id"),
        }
        for i, a in enumerate(args):
            if "Collective name" in a or ("Input Dims" in a and _is_comm_name(X[i].get("name"))):
                self.comm_args[self.n + i] = {k: a[k] for k in (*_COMM_ARG_KEYS, "Input Dims") if k in a}
        self.parts.append(part)
        self.n += len(X)

    def _add_memory(self, mem: list) -> None:
        args = [a if type(a) is dict else _EMPTY for a in (e.get("args") for e in mem)]
        self.mem_parts.append(
            {
                "ts": _floats([e.get("ts") for e in mem]),
                "device_type": _intarg(args, "Device Type"),
                "device_id": _intarg(args, "Device Id"),
                "allocated": _intarg(args, "Total Allocated"),
                "reserved": _intarg(args, "Total Reserved"),
                "bytes": _intarg(args, "Bytes"),
                "thread": self.threads.ids([(_hashable(e.get("pid")), _hashable(e.get("tid"))) for e in mem]),
            }
        )


def _hashable(v):
    return v if isinstance(v, (int, str, float)) or v is None else str(v)


def _is_comm_name(name) -> bool:
    return isinstance(name, str) and (name.startswith("gloo:") or name.startswith("c10d::") or "nccl" in name)


def _cat(parts: list[dict], key: str, dtype) -> np.ndarray:
    return np.concatenate([p[key] for p in parts]).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def load_trace(path: str) -> RankTrace:
    """Parse one trace file into a RankTrace (rank from distributedInfo only; discovery may fill it)."""
    raw = read_bytes(path)
    nbytes = len(raw)
    header, pieces = _events_and_header(raw, path)
    del raw
    cols = _Columns()
    while pieces:
        cols.add(pieces.pop(0))
    if not isinstance(header, dict):
        header = {}
    warnings: list[str] = []
    if cols.bad:
        warnings.append(f"{cols.bad} trace events are not JSON objects and were ignored")

    ts_us = _cat(cols.parts, "ts", np.float64)
    dur_us = _cat(cols.parts, "dur", np.float64)
    keep = np.isfinite(ts_us)
    if (~keep).any():
        warnings.append(f"{int((~keep).sum())} events without a numeric ts were ignored")
    nodur = ~np.isfinite(dur_us) & keep
    if nodur.any():
        warnings.append(f"{int(nodur.sum())} complete events have no dur; counted as zero-length")
    neg = (dur_us < 0) & keep
    if neg.any():
        warnings.append(f"{int(neg.sum())} events have a negative dur; counted as zero-length")
    dur_us = np.where(np.isfinite(dur_us) & (dur_us > 0), dur_us, 0.0)
    origin = float(math.floor(ts_us[keep].min())) if keep.any() else 0.0
    ts = np.rint((ts_us - origin) * 1000.0)
    dur = np.rint(dur_us * 1000.0)
    # Guard against absurd values (e.g. 'Record Window End' decades away) overflowing int64.
    big = keep & ((np.abs(ts) > 2**62) | (dur > 2**62))
    if big.any():
        warnings.append(f"{int(big.sum())} events have timestamps beyond any plausible trace and were ignored")
        keep &= ~big
    order = np.argsort(np.where(keep, ts, np.inf), kind="stable")[: int(keep.sum())]
    comm_args = {}
    if cols.comm_args:
        pos = np.full(len(ts), -1, np.int64)
        pos[order] = np.arange(len(order))
        comm_args = {int(pos[i]): a for i, a in cols.comm_args.items() if pos[i] >= 0}

    thread_keys = cols.threads.values
    thread_names = {}
    for i, key in enumerate(thread_keys):
        if key in cols.thread_names:
            thread_names[i] = cols.thread_names[key]
    mem = _memory(cols, origin)
    return RankTrace(
        path=path,
        rank=_rank_from(header),
        rank_source="distributedInfo" if _rank_from(header) is not None else "missing",
        meta=header,
        origin_us=origin,
        names=[n if isinstance(n, str) else str(n) for n in cols.names.values],
        cats=[_CAT_ALIASES.get(c, c) if isinstance(c, str) else str(c) for c in cols.cats.values],
        threads=list(thread_keys),
        thread_names=thread_names,
        ts=ts[order].astype(np.int64),
        dur=dur[order].astype(np.int64),
        name=_cat(cols.parts, "name", np.int32)[order],
        cat=_cat(cols.parts, "cat", np.int16)[order],
        thread=_cat(cols.parts, "thread", np.int32)[order],
        stream=_cat(cols.parts, "stream", np.int64)[order].clip(-1, 2**31 - 1).astype(np.int32),
        corr=_cat(cols.parts, "corr", np.int64)[order],
        ext=_cat(cols.parts, "ext", np.int64)[order],
        comm_args=comm_args,
        memory=mem,
        warnings=warnings,
        bytes_read=nbytes,
    )


def _memory(cols: _Columns, origin: float) -> MemoryEvents:
    if not cols.mem_parts:
        return MemoryEvents.empty()
    ts_us = _cat(cols.mem_parts, "ts", np.float64)
    ok = np.isfinite(ts_us) & (np.abs(ts_us - origin) < 2**50)
    o = np.argsort(ts_us[ok], kind="stable")

    def col(key, dtype):
        return _cat(cols.mem_parts, key, np.int64)[ok][o].astype(dtype)

    return MemoryEvents(
        ts=np.rint((ts_us[ok][o] - origin) * 1000.0).astype(np.int64),
        device_type=col("device_type", np.int16),
        device_id=col("device_id", np.int16),
        allocated=col("allocated", np.int64),
        reserved=col("reserved", np.int64),
        bytes=col("bytes", np.int64),
        thread=col("thread", np.int32),
    )


def _rank_from(header: dict) -> int | None:
    d = header.get("distributedInfo")
    if isinstance(d, dict):
        r = d.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            return r
    return None


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
