"""Kineto JSON (plain, gzip, gzip twice) -> RankTrace columns, in bounded memory.

stream.py hands over the `traceEvents` array in pieces of about a MB; each piece is reduced at once to
numpy columns, so no list of dicts for the whole trace ever exists: peak memory is a few pieces plus the
columns (~50 bytes per complete event). Pieces are decoded by msgspec into slotted structs where it is
installed (fastjson.py), else by orjson into dicts; columns come out of either by C-level iteration
(itemgetter / attrgetter / dict.get maps, dict-based interning of names, categories and threads), and a
piece with malformed events takes a per-event path. Any malformed input raises TraceError naming the file
and the problem. With LLMDIAG_CACHE_DIR set, parsed columns are kept on disk (cache.py).
"""

from __future__ import annotations

import math

import numpy as np

from llmdiag.diagnose.io import ahead, cache
from llmdiag.diagnose.io import fastjson
from llmdiag.diagnose.io import stream as tracestream
from llmdiag.diagnose.errors import TraceError
from llmdiag.diagnose.io.columns import Columns, concat
from llmdiag.diagnose.io.discover import file_size
from llmdiag.diagnose.io.trace import MemoryEvents, RankTrace
from llmdiag.diagnose.io.stream import JSON_HINT, Malformed, Stream, Whole, read_bytes

__all__ = ["load_trace", "read_bytes", "file_size"]
# The 2021 schema (kineto's TensorBoard samples) used capitalised categories.
_CAT_ALIASES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                "Memset": "gpu_memset"}
_PLAUSIBLE_US = 1e15  # ~31 years: a timestamp this far from the trace's median is an absurd value


# ---------------------------------------------------------------------------------------------- RankTrace
SPLIT_MIN_BYTES = 32 << 20  # on disk (~300 MB of JSON): 1.3x on a 1 GB rank, but ~1.1x (and slower under load) at 100 MB


def load_trace(path: str, helpers: int = 0) -> RankTrace:
    """Parse one trace file into a RankTrace (rank from distributedInfo only; discovery may fill it).

    With helpers > 1, a file over SPLIT_MIN_BYTES is parsed by that many forked processes (split_parse.py).
    A trace the command parsed ahead (ahead.py) is taken from there while the file is unchanged.
    With LLMDIAG_CACHE_DIR set, a file parsed before (same content identity) is read from there (cache.py).
    The file's identity is taken before the parse and checked after it: a trace that changed during the read
    is read once more (with a warning), and left out if it changes again; it is never cached under a key
    that does not describe the bytes parsed.
    """
    return load_identified(path, helpers)[1]


def load_identified(path: str, helpers: int = 0) -> tuple[str | None, RankTrace]:
    """(the file's identity as parsed, its RankTrace): `load_trace`, for a caller that hands the trace on."""
    before = cache.identity(path)
    if (t := ahead.claim(path, before)) is not None:
        return before, t
    cache_dir = cache.directory()
    if cache_dir and (t := cache.load(path, cache_dir, before)) is not None:
        return before, t
    t = _parse_once(path, helpers)
    after = cache.identity(path)
    if before != after:  # rewritten or replaced during the read: never blend two versions
        before = after
        t = _parse_once(path, helpers)
        after = cache.identity(path)
        if before != after:
            raise TraceError("the trace kept changing while it was read (size, mtime, inode or content); left out",
                             path, "analyse it once it is complete")
        t.warnings.append("the trace changed while it was read; it was read again, whole, after the change")
    if cache_dir and before is not None:
        cache.store(t, cache_dir, before)
    return after, t


def _parse_once(path: str, helpers: int) -> RankTrace:
    t = None
    if helpers > 1 and file_size(path) >= SPLIT_MIN_BYTES:
        from llmdiag.diagnose.io.split_parse import parse_split

        if (got := parse_split(path, helpers)) is not None:
            cols, header, nbytes, replaced = got
            t = _build(path, header, cols, nbytes)
            if replaced:
                t.warnings.append(f"{replaced} invalid UTF-8 sequence(s) in the trace were replaced by U+FFFD")
    if t is None:
        t = _parse(path)
    return t


def _parse(path: str) -> RankTrace:
    cols, stream = Columns(), Stream(path, fastjson.decoder(), fastjson.ERRORS)
    try:
        for events in stream.pieces():
            cols.add(events)
            del events
    except (Whole, Malformed) as e:
        if isinstance(e, Malformed) and e.size > tracestream.WHOLE_LIMIT:
            raise TraceError(str(e), path, JSON_HINT) from None
        cols, stream = Columns(), Stream(path)
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


def _times(cols: Columns, warnings: list[str]):
    """int64 ns (ts, dur) relative to the origin, the events kept, and the origin in µs."""
    ts_us = concat(cols.parts, "ts", np.float64)
    dur_us = concat(cols.parts, "dur", np.float64)
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


def _renumber_threads(cols: Columns) -> None:
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


def _build(path: str, header: dict, cols: Columns, nbytes: int) -> RankTrace:
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
        return concat(cols.parts, key, dtype)[order]

    cat, thread = col("cat", np.int16), col("thread", np.int32)  # concat pops: each column once
    return RankTrace(
        path=path,
        rank=rank,
        meta=header,
        origin_us=origin,
        names=[n if isinstance(n, str) else str(n) for n in cols.names],
        cats=[_CAT_ALIASES.get(c, c) if isinstance(c, str) else str(c) for c in cols.cats],
        threads=thread_keys,
        thread_names=thread_names,
        ts=ts[order].astype(np.int64),
        dur=dur[order].astype(np.int64),
        name=col("name", np.int32),
        cat=cat,
        thread=thread,
        stream=_annotation_streams(col("stream", np.int64), cat, thread, cols.cats, thread_keys),
        corr=col("corr", np.int64),
        ext=col("ext", np.int64),
        comm_args=comm_args,
        memory=_memory(cols, origin),
        warnings=warnings,
        bytes_read=nbytes,
    )


def _annotation_streams(stream: np.ndarray, cat: np.ndarray, thread: np.ndarray, cats, thread_keys) -> np.ndarray:
    """The stream column, int32, -1 for host events. Kineto writes a `gpu_user_annotation` (a
    record_function's device-side span) with no `stream` arg, on pid = device and tid = stream: without
    this it would read as a host event, and every `stream < 0` host mask (microsteps per step, host
    activity, the MoE labels' device spans) would count it twice."""
    out = stream.clip(-1, 2**31 - 1).astype(np.int32)
    names = list(cats)
    if "gpu_user_annotation" not in names:
        return out
    rows = np.flatnonzero((cat == names.index("gpu_user_annotation")) & (out < 0))
    if len(rows):
        tid = np.array([k[1] if isinstance(k[1], int) and not isinstance(k[1], bool) and 0 <= k[1] < 2**31 else -1
                        for k in thread_keys] or [-1], np.int64)
        out[rows] = tid[thread[rows]]
    return out


def _memory(cols: Columns, origin: float) -> MemoryEvents:
    if not cols.mem_parts:
        return MemoryEvents.empty()
    ts_us = concat(cols.mem_parts, "ts", np.float64)
    ok = np.isfinite(ts_us) & (np.abs(ts_us - origin) < 2**50)
    o = np.argsort(ts_us[ok], kind="stable")

    def col(key, dtype):
        return concat(cols.mem_parts, key, np.int64)[ok][o].astype(dtype)

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
