"""Kineto JSON (plain, gzip, gzip twice) -> RankTrace columns, in bounded memory.

tracestream.py hands over the `traceEvents` array in pieces of about a MB; each piece is reduced at once to
numpy columns, so no list of dicts for the whole trace ever exists: peak memory is a few pieces plus the
columns (~50 bytes per complete event). Pieces are decoded by msgspec into slotted structs where it is
installed (fastjson.py), else by orjson into dicts; columns come out of either by C-level iteration
(itemgetter / attrgetter / dict.get maps, dict-based interning of names, categories and threads), and a
piece with malformed events takes a per-event path. Any malformed input raises TraceError naming the file
and the problem. With LLMDIAG_CACHE_DIR set, parsed columns are kept on disk (cache.py).
"""

from __future__ import annotations

import math
import os
from itertools import compress, repeat
from operator import eq, itemgetter

import numpy as np

from diagnose import cache, fastjson, tracestream
from diagnose.errors import TraceError
from diagnose.trace import MemoryEvents, RankTrace
from diagnose.tracestream import JSON_HINT, Malformed, Stream, Whole, read_bytes

__all__ = ["load_trace", "read_bytes", "file_size"]
_EMPTY: dict = {}
# The 2021 schema (kineto's TensorBoard samples) used capitalised categories.
_CAT_ALIASES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                "Memset": "gpu_memset"}
_COMM_ARG_KEYS = fastjson.COMM_FIELDS  # the args kept for collectives (and gloo spans' Input Dims)
_PLAUSIBLE_US = 1e15  # ~31 years: a timestamp this far from the trace's median is an absurd value


# ---------------------------------------------------------------------------------------------- columns
def _intern(index: dict, keys: list) -> np.ndarray:
    """Ids of `keys` in `index` (insertion-ordered: list(index) are the values), adding new ones.

    The per-key work is C-level: dict.fromkeys finds the piece's distinct keys (hashing each once; str
    hashes are cached), only those are looked at in Python, then one dict lookup per key.
    """
    for k in dict.fromkeys(keys):
        if k not in index:
            index[k] = len(index)
    return np.fromiter(map(index.__getitem__, keys), np.int32, len(keys))


def _col(rows: list, key: str, default=None) -> list:
    try:
        return list(map(itemgetter(key), rows))
    except KeyError:
        return [e.get(key, default) for e in rows]


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


def _ints(vals: list) -> np.ndarray:
    try:
        a = np.array(vals, dtype=np.int64)
        if a.ndim == 1:  # lists of equal length would make a 2-D array
            return a
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([int(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**62 else -1 for v in vals],
                    np.int64)


def _floats(vals: list) -> np.ndarray:
    try:
        a = np.array(vals, dtype=np.float64)
        if a.ndim == 1:
            return a
    except (TypeError, ValueError):
        pass
    return np.array([_num(v) for v in vals], dtype=np.float64)


def _hashable(v):
    return v if isinstance(v, (int, str, float)) or v is None else str(v)


def _is_comm_name(name) -> bool:
    return isinstance(name, str) and (name.startswith("gloo:") or name.startswith("c10d::") or "nccl" in name)


class _DictView:
    """Column access over orjson's event dicts (fastjson.StructView does the same over msgspec structs)."""

    field = staticmethod(_col)

    @staticmethod
    def args(rows: list) -> list:
        args = _col(rows, "args", _EMPTY)
        return args if set(map(type, args)) <= {dict} else [a if type(a) is dict else _EMPTY for a in args]

    @staticmethod
    def arg(args: list, key: str) -> list:
        return list(map(dict.get, args, repeat(key), repeat(fastjson.ARG_FIELDS[key][1])))

    @staticmethod
    def has(args: list, key: str) -> list:
        return list(map(dict.__contains__, args, repeat(key)))

    @staticmethod
    def comm(a: dict) -> dict:
        return {k: a[k] for k in _COMM_ARG_KEYS if k in a}

    @staticmethod
    def get(e: dict, key: str, default=None):
        return e.get(key, default)


class _Columns:
    """Accumulates columns over event pieces."""

    def __init__(self):
        self.names: dict = {}
        self.cats: dict = {}
        self.threads: dict = {}
        self.comm_name: list[bool] = []  # per name id: a name a gloo/c10d span with Input Dims may carry
        self.thread_names: dict = {}
        self.parts: list[dict] = []
        self.mem_parts: list[dict] = []
        self.comm_args: dict[int, dict] = {}
        self.n = 0
        self.bad = 0

    def add(self, events: list) -> None:
        v = fastjson.StructView if fastjson.is_struct_list(events) else _DictView
        try:
            ph = v.field(events, "ph")
        except (KeyError, TypeError, AttributeError):
            self.bad += sum(1 for e in events if type(e) is not dict)
            ph = [e.get("ph") if type(e) is dict else None for e in events]
        for e in compress(events, map(eq, ph, repeat("M"))):
            if v.get(e, "name") == "thread_name":
                a = v.args([e])[0]
                self.thread_names[(_hashable(v.get(e, "pid")), _hashable(v.get(e, "tid")))] = str(v.arg([a], "name")[0])
        instants = list(compress(events, map(eq, ph, repeat("i"))))
        if instants:
            mem = list(compress(instants, map(eq, v.field(instants, "name", ""), repeat("[memory]"))))
            if mem:
                self._add_memory(mem, v)
        X = list(compress(events, map(eq, ph, repeat("X"))))
        del events, ph
        if X:
            self._add_complete(X, v)

    def _add_complete(self, X: list, v) -> None:
        args = v.args(X)
        names = v.field(X, "name", "")
        try:
            name_ids = _intern(self.names, names)
        except TypeError:  # unhashable name: hostile or broken trace
            name_ids = _intern(self.names, [n if isinstance(n, str) else str(n) for n in names])
        del names
        cats = v.field(X, "cat", "")
        try:
            cat_ids = _intern(self.cats, cats)
        except TypeError:
            cat_ids = _intern(self.cats, [c if isinstance(c, str) else str(c) for c in cats])
        del cats
        thread_ids = self._thread_ids(X, v)
        self.parts.append({
            "ts": _floats(v.field(X, "ts", None)),
            "dur": _floats(v.field(X, "dur", math.nan)),
            "name": name_ids,
            "cat": cat_ids,
            "thread": thread_ids,
            "stream": _ints(v.arg(args, "stream")),
            "corr": _ints(v.arg(args, "correlation")),
            "ext": _ints(v.arg(args, "External id")),
        })
        if len(self.comm_name) < len(self.names):
            self.comm_name += [_is_comm_name(n) for n in list(self.names)[len(self.comm_name):]]
        comm = set(compress(range(len(X)), v.has(args, "Collective name")))
        if any(self.comm_name):  # gloo / c10d spans: their Input Dims size the message
            gloo = np.flatnonzero(np.array(self.comm_name, bool)[name_ids]).tolist()
            comm.update(i for i, h in zip(gloo, v.has([args[i] for i in gloo], "Input Dims")) if h)
        for i in sorted(comm):
            self.comm_args[self.n + i] = v.comm(args[i])
        self.n += len(X)

    def _thread_ids(self, rows: list, v) -> np.ndarray:
        pids, tids = v.field(rows, "pid", None), v.field(rows, "tid", None)
        try:
            p, t = np.array(pids), np.array(tids)
        except (ValueError, OverflowError):  # ragged lists: the per-key path below
            p = t = np.zeros(0)
        if p.dtype.kind == t.dtype.kind == "i" and p.ndim == t.ndim == 1 and len(p) and p.min() >= 0 and t.min() >= 0 \
                and p.max() < 2**31 and t.max() < 2**32:  # the usual int pid/tid: distinct pairs found by numpy
            u, first, inv = np.unique((p << 32) | t, return_index=True, return_inverse=True)
            o = np.argsort(first)  # ids in order of first appearance, as the per-key path gives them
            ids = np.empty(len(u), np.int32)
            ids[o] = _intern(self.threads, [(k >> 32, k & 0xFFFFFFFF) for k in u[o].tolist()])
            return ids[inv.reshape(-1)]
        keys = list(zip(pids, tids))
        try:
            return _intern(self.threads, keys)
        except TypeError:  # unhashable pid/tid
            return _intern(self.threads, [(_hashable(p), _hashable(t)) for p, t in keys])

    def _add_memory(self, mem: list, v) -> None:
        args = v.args(mem)
        self.mem_parts.append({
            "ts": _floats(v.field(mem, "ts", None)),
            "device_type": _ints(v.arg(args, "Device Type")),
            "device_id": _ints(v.arg(args, "Device Id")),
            "allocated": _ints(v.arg(args, "Total Allocated")),
            "reserved": _ints(v.arg(args, "Total Reserved")),
            "bytes": _ints(v.arg(args, "Bytes")),
            "thread": self._thread_ids(mem, v),
        })


def _cat(parts: list[dict], key: str, dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    return np.concatenate([p.pop(key) for p in parts]).astype(dtype, copy=False)


# ---------------------------------------------------------------------------------------------- RankTrace
SPLIT_MIN_BYTES = 32 << 20  # on disk (~300 MB of JSON): 1.3x on a 1 GB rank, but ~1.1x (and slower under load) at 100 MB


def load_trace(path: str, helpers: int = 0) -> RankTrace:
    """Parse one trace file into a RankTrace (rank from distributedInfo only; discovery may fill it).

    With helpers > 1, a file over SPLIT_MIN_BYTES is parsed by that many forked processes (split_parse.py).
    With LLMDIAG_CACHE_DIR set, a file parsed before (same path, size and mtime) is read from there (cache.py).
    """
    cache_dir = cache.directory()
    if cache_dir and (t := cache.load(path, cache_dir)) is not None:
        return t
    t = None
    if helpers > 1 and file_size(path) >= SPLIT_MIN_BYTES:
        from diagnose.split_parse import parse_split

        if (got := parse_split(path, helpers)) is not None:
            cols, header, nbytes, replaced = got
            t = _build(path, header, cols, nbytes)
            if replaced:
                t.warnings.append(f"{replaced} invalid UTF-8 sequence(s) in the trace were replaced by U+FFFD")
    if t is None:
        t = _parse(path)
    if cache_dir:
        cache.store(t, cache_dir)
    return t


def _parse(path: str) -> RankTrace:
    cols, stream = _Columns(), Stream(path, fastjson.decoder(), fastjson.ERRORS)
    try:
        for events in stream.pieces():
            cols.add(events)
            del events
    except (Whole, Malformed) as e:
        if isinstance(e, Malformed) and e.size > tracestream.WHOLE_LIMIT:
            raise TraceError(str(e), path, JSON_HINT) from None
        cols, stream = _Columns(), Stream(path)
        stream.header, events = stream.whole()
        for k in range(0, len(events), 50_000):
            cols.add(events[k : k + 50_000])
        del events
    header = stream.header if isinstance(stream.header, dict) else {}
    t = _build(path, header, cols, stream.nbytes)
    if stream.replaced:
        t.warnings.append(f"{stream.replaced} invalid UTF-8 sequence(s) in the trace were replaced by U+FFFD")
    return t


def _middle(x: np.ndarray) -> float:
    """A median element (np.median would import numpy.ma on first use: 20 ms of a small trace's analysis)."""
    k = len(x) // 2
    return float(np.partition(x, k)[k])


def _times(cols: _Columns, warnings: list[str]):
    """int64 ns (ts, dur) relative to the origin, the events kept, and the origin in µs."""
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
    with np.errstate(over="ignore", invalid="ignore"):
        # The origin is the earliest plausible timestamp: one absurd event (-1e300) must not push the rest away.
        sane = keep & (np.abs(ts_us - _middle(ts_us[keep])) < _PLAUSIBLE_US) if keep.any() else keep
        origin = float(math.floor(ts_us[sane].min())) if sane.any() else 0.0
        ts = np.rint((ts_us - origin) * 1000.0)
        dur = np.rint(dur_us * 1000.0)
        # Guard against absurd values (e.g. 'Record Window End' decades away) overflowing int64.
        big = keep & ((np.abs(ts) > 2**62) | (dur > 2**62))
    if big.any():
        warnings.append(f"{int(big.sum())} events have timestamps beyond any plausible trace and were ignored")
        keep &= ~big
    return ts, dur, keep, origin


def _renumber_threads(cols: _Columns) -> None:
    """Thread ids in order of first appearance among complete events, then memory events. Interning sees
    each piece's memory events before its complete ones, so without this the numbering would depend on
    where pieces were cut (serial and split parses cut differently)."""
    seen = [p["thread"] for p in cols.parts] + [p["thread"] for p in cols.mem_parts]
    if not seen or not cols.threads:
        return
    ids = np.concatenate(seen)
    first = np.full(len(cols.threads), len(ids), np.int64)
    np.minimum.at(first, ids, np.arange(len(ids)))
    order = np.argsort(first, kind="stable")  # old ids, in new order
    new = np.empty(len(order), np.int32)
    new[order] = np.arange(len(order), dtype=np.int32)
    keys = list(cols.threads)
    cols.threads = {keys[k]: i for i, k in enumerate(order.tolist())}
    for p in cols.parts + cols.mem_parts:
        p["thread"] = new[p["thread"]]


def _build(path: str, header: dict, cols: _Columns, nbytes: int) -> RankTrace:
    _renumber_threads(cols)
    warnings: list[str] = []
    if cols.bad:
        warnings.append(f"{cols.bad} trace events are not JSON objects and were ignored")
    ts, dur, keep, origin = _times(cols, warnings)
    order = np.argsort(np.where(keep, ts, np.inf), kind="stable")[: int(keep.sum())]
    comm_args = {}
    if cols.comm_args:
        pos = np.full(len(ts), -1, np.int64)
        pos[order] = np.arange(len(order))
        comm_args = {int(pos[i]): a for i, a in cols.comm_args.items() if pos[i] >= 0}
    thread_keys = list(cols.threads)
    thread_names = {i: cols.thread_names[k] for i, k in enumerate(thread_keys) if k in cols.thread_names}
    rank = _rank_from(header)

    def col(key, dtype):
        return _cat(cols.parts, key, dtype)[order]

    return RankTrace(
        path=path,
        rank=rank,
        rank_source="distributedInfo" if rank is not None else "missing",
        meta=header,
        origin_us=origin,
        names=[n if isinstance(n, str) else str(n) for n in cols.names],
        cats=[_CAT_ALIASES.get(c, c) if isinstance(c, str) else str(c) for c in cols.cats],
        threads=thread_keys,
        thread_names=thread_names,
        ts=ts[order].astype(np.int64),
        dur=dur[order].astype(np.int64),
        name=col("name", np.int32),
        cat=col("cat", np.int16),
        thread=col("thread", np.int32),
        stream=col("stream", np.int64).clip(-1, 2**31 - 1).astype(np.int32),
        corr=col("corr", np.int64),
        ext=col("ext", np.int64),
        comm_args=comm_args,
        memory=_memory(cols, origin),
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
