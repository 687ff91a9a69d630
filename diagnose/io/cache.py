"""Optional on-disk cache of parsed traces, so a second `analyze` of the same files skips the JSON parse.

Off unless LLMDIAG_CACHE_DIR names a directory (e.g. ~/.cache/llmdiag). One uncompressed .npz per trace
file holds the RankTrace columns plus a small JSON blob (names, header, collective args, ...), keyed by the
file's content identity (`identity`: absolute path, size, mtime (ns), inode and a hash of its first and last
64 kB) and the cache format version: an edited or replaced trace misses, even one rewritten with the same
size and mtime. The identity is taken before the parse and checked after it (loader.py): a trace replaced
while it was parsed is never stored under the new file's key. An entry is read only if it is a regular file
(never a FIFO or a link), within a size cap, stored uncompressed, and every column has the type, dtype and
length a RankTrace needs; anything else is a miss. Entries are written to a temporary name and renamed, so
concurrent workers never read half a file. Nothing is ever evicted: delete the directory to reclaim the
space (about 50 bytes per complete event, a tenth of the decompressed JSON).
"""

from __future__ import annotations

import os
import stat

import numpy as np
import orjson

from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.io.trace import MemoryEvents, RankTrace
from llmdiag.diagnose.model.files import open_atomic

from hashlib import sha1

ENV = "LLMDIAG_CACHE_DIR"
VERSION = 11  # 2: all_to_all split sizes kept in comm_args; 3: send/recv peers (Src Rank / Dst Rank); 4: GEMM ops' Input type;
# 5: gloo all-to-alls' split sizes (from Concrete Inputs); 6: gpu_user_annotation's stream from its tid;
# 7: GEMM ops' Input Dims; 8: SDPA attention ops' Input type and Input Dims (metrics/rank/roofline.py);
# 9: ProfilerStep#N under an op category filed as user_annotation; 10: cuda_sync events' wait targets;
# 11: device-to-host copies' bytes
_COLUMNS = ("ts", "dur", "name", "cat", "thread", "stream", "corr", "ext")
_MEMORY = ("ts", "device_type", "device_id", "allocated", "reserved", "bytes", "thread")


def directory() -> str | None:
    d = os.environ.get(ENV, "").strip()
    return os.path.expanduser(d) if d else None


EDGE = 1 << 16  # bytes hashed at each end of a trace for its identity
_DTYPES = {"ts": np.int64, "dur": np.int64, "name": np.int32, "cat": np.int16, "thread": np.int32,
           "stream": np.int32, "corr": np.int64, "ext": np.int64}
_MEM_DTYPES = {"ts": np.int64, "device_type": np.int16, "device_id": np.int16, "allocated": np.int64,
               "reserved": np.int64, "bytes": np.int64, "thread": np.int32}


def identity(path: str) -> str | None:
    """What the trace is, content included: abspath, size, mtime_ns, inode, and a hash of its first and last
    EDGE bytes. None when it cannot be read as a regular file (nothing is cached then)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        h = sha1(os.pread(fd, EDGE, 0))
        if st.st_size > EDGE:
            h.update(os.pread(fd, EDGE, max(EDGE, st.st_size - EDGE)))
    except OSError:
        return None
    finally:
        os.close(fd)
    return f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{h.hexdigest()}"


def _entry(ident: str | None, cache_dir: str) -> str | None:
    if ident is None:
        return None
    key = f"{VERSION}|{ident}"
    return os.path.join(cache_dir, sha1(key.encode("utf-8", "surrogatepass")).hexdigest() + ".npz")


def _cap(ident: str) -> int:
    """Largest plausible entry for a trace of this size: columns are ~50 bytes per event, and a gzipped
    trace is ~30 bytes per event on disk."""
    size = int(ident.split("|")[-4])
    return 64 * size + (64 << 20)


def _open_entry(entry: str):
    """A regular file opened without following a link or blocking on a FIFO, or None."""
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _column(z, key: str, dtype, n: int | None) -> np.ndarray:
    a = z[key]
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != 1 or (n is not None and len(a) != n):
        raise ValueError(f"bad cached column {key}")
    return a


def load(path: str, cache_dir: str, ident: str | None = None) -> RankTrace | None:
    """The cached RankTrace of `path` (whose identity is `ident`, taken by the caller before it parses), or
    None: a miss for anything but a valid entry of this exact content."""
    import zipfile  # only with the cache on: analyze without it never opens an archive

    ident = identity(path) if ident is None else ident
    entry = _entry(ident, cache_dir)
    if entry is None:
        return None
    f = _open_entry(entry)
    if f is None:
        return None
    try:
        with f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            if any(i.compress_type != zipfile.ZIP_STORED for i in infos) or sum(i.file_size for i in infos) > _cap(ident):
                return None  # np.savez writes stored members: anything else was not written by us (a zip bomb?)
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                n = len(_column(z, "ts", np.int64, None))
                cols = {k: _column(z, k, dt, n) for k, dt in _DTYPES.items()}
                m = len(_column(z, "mem_ts", np.int64, None))
                mem = MemoryEvents(**{k: _column(z, "mem_" + k, dt, m) for k, dt in _MEM_DTYPES.items()})
                info = orjson.loads(_column(z, "info", np.uint8, None).tobytes())
        if not isinstance(info, dict) or not _indices_fit(cols, info):
            return None
        return _trace(path, info, cols, mem)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile,
            orjson.JSONDecodeError):
        return None


def _indices_fit(cols: dict, info: dict) -> bool:
    """Interned indices point into their tables (a stale or forged entry would index past them)."""
    for key, table in (("name", "names"), ("cat", "cats"), ("thread", "threads")):
        a, n = cols[key], len(info.get(table) or ())
        if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
            return False
    return True


def _trace(path: str, info: dict, cols: dict, mem: MemoryEvents) -> RankTrace:
    return RankTrace(
        path=path, rank=info["rank"], meta=info["meta"], origin_us=info["origin_us"],
        names=info["names"], cats=info["cats"], threads=[tuple(k) for k in info["threads"]],
        thread_names={int(k): v for k, v in info["thread_names"].items()},
        comm_args={int(k): v for k, v in info["comm_args"].items()}, memory=mem, warnings=info["warnings"],
        bytes_read=info["bytes_read"], **cols,
    )


def store(t: RankTrace, cache_dir: str, ident: str | None = None) -> bool:
    """Writes `t` under `ident` (its file's identity before the parse; the caller checked it still holds);
    False (and nothing written) where that is not possible."""
    entry = _entry(ident if ident is not None else identity(t.path), cache_dir)
    if entry is None:
        return False
    info = {"rank": t.rank, "meta": t.meta, "origin_us": t.origin_us, "names": t.names,
            "cats": t.cats, "threads": t.threads, "thread_names": t.thread_names, "comm_args": t.comm_args,
            "warnings": t.warnings, "bytes_read": t.bytes_read}
    try:
        blob = orjson.dumps(info, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # values JSON cannot hold (lone surrogates)
        return False
    try:  # the one writer (model/files.py): a link or FIFO planted at the entry is refused, not followed
        with open_atomic(entry, 0o600, sync=False) as f:
            np.savez(f, info=np.frombuffer(blob, np.uint8), **{k: getattr(t, k) for k in _COLUMNS},
                     **{"mem_" + k: getattr(t.memory, k) for k in _MEMORY})
        return True
    except (LlmdiagError, ValueError, TypeError):  # an unwritable folder, a full disk: no cache entry
        return False
