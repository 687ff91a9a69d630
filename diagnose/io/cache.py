"""Optional on-disk cache of parsed traces, so a second `analyze` of the same files skips the JSON parse.

Off unless LLMDIAG_CACHE_DIR names a directory (e.g. ~/.cache/llmdiag). One uncompressed .npz per trace
file holds the RankTrace columns plus a small JSON blob (names, header, collective args, ...), keyed by
the file's absolute path, size and mtime (ns) and the cache format version: an edited or replaced trace
misses. Entries are written to a temporary name and renamed, so concurrent workers never read half a file;
an unreadable entry is a miss. Nothing is ever evicted: delete the directory to reclaim the space
(about 50 bytes per complete event, a tenth of the decompressed JSON).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile

import numpy as np
import orjson

from diagnose.io.trace import MemoryEvents, RankTrace

ENV = "LLMDIAG_CACHE_DIR"
VERSION = 4  # 2: all_to_all split sizes kept in comm_args; 3: send/recv peers (Src Rank / Dst Rank); 4: GEMM ops' Input type
_COLUMNS = ("ts", "dur", "name", "cat", "thread", "stream", "corr", "ext")
_MEMORY = ("ts", "device_type", "device_id", "allocated", "reserved", "bytes", "thread")


def directory() -> str | None:
    d = os.environ.get(ENV, "").strip()
    return os.path.expanduser(d) if d else None


def _entry(path: str, cache_dir: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = f"{VERSION}|{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}"
    return os.path.join(cache_dir, hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest() + ".npz")


def load(path: str, cache_dir: str) -> RankTrace | None:
    """The cached RankTrace of `path`, or None."""
    entry = _entry(path, cache_dir)
    if entry is None or not os.path.exists(entry):
        return None
    try:
        with np.load(entry, allow_pickle=False) as z:
            cols = {k: z[k] for k in _COLUMNS}
            mem = MemoryEvents(**{k: z["mem_" + k] for k in _MEMORY})
            info = orjson.loads(z["info"].tobytes())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, orjson.JSONDecodeError):
        return None
    return RankTrace(
        path=path, rank=info["rank"], meta=info["meta"], origin_us=info["origin_us"],
        names=info["names"], cats=info["cats"], threads=[tuple(k) for k in info["threads"]],
        thread_names={int(k): v for k, v in info["thread_names"].items()},
        comm_args={int(k): v for k, v in info["comm_args"].items()}, memory=mem, warnings=info["warnings"],
        bytes_read=info["bytes_read"], **cols,
    )


def store(t: RankTrace, cache_dir: str) -> bool:
    """Writes `t` for its file; False (and nothing written) where that is not possible."""
    entry = _entry(t.path, cache_dir)
    if entry is None:
        return False
    info = {"rank": t.rank, "meta": t.meta, "origin_us": t.origin_us, "names": t.names,
            "cats": t.cats, "threads": t.threads, "thread_names": t.thread_names, "comm_args": t.comm_args,
            "warnings": t.warnings, "bytes_read": t.bytes_read}
    try:
        blob = orjson.dumps(info, option=orjson.OPT_NON_STR_KEYS)
        os.makedirs(cache_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=cache_dir)
    except (TypeError, OSError):  # values JSON cannot hold (lone surrogates), or an unwritable directory
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, info=np.frombuffer(blob, np.uint8), **{k: getattr(t, k) for k in _COLUMNS},
                     **{"mem_" + k: getattr(t.memory, k) for k in _MEMORY})
        os.replace(tmp, entry)
        return True
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        return False
