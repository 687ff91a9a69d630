"""The trace cache serves the numbers of the bytes on disk, or nothing (issue 17 cases 7 and 12).

Each case analyses a rank with LLMDIAG_CACHE_DIR set and compares with the same trace analysed without a
cache (the independent answer): a rewrite with the same size and mtime, a replaced file, and hostile entries
(0 bytes, a wrong dtype, a FIFO, a zip bomb) must all give the uncached numbers, never hang, never crash.
A trace rewritten during its parse is re-read once (warning) or left out, never blended.
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

from llmdiag.diagnose.errors import TraceError
from llmdiag.diagnose.io import cache, loader
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import gpu_rank


def numbers(path: str) -> dict:
    o = run_job(RankJob(path))
    assert o.error is None, o.error
    return {"compute": o.metrics.compute_ms, "comm": o.metrics.comm_ms, "step": o.metrics.step_time_ms}


def trace(tmp_path, gemm_us: int = 600):
    p = tmp_path / "rank0.json"
    b = gpu_rank(0, world_size=1)
    raw = b.to_bytes().replace(b'"dur":600', f'"dur":{gemm_us}'.encode())
    p.write_bytes(raw)
    return p


@pytest.fixture
def cached(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(d))
    return d


def entry_of(p, d) -> str:
    return cache._entry(cache.identity(str(p)), str(d))


def test_same_size_same_mtime_rewrite_is_a_miss(tmp_path, cached):
    p = trace(tmp_path, 600)
    first = numbers(str(p))
    st = os.stat(p)
    raw = p.read_bytes().replace(b'"dur":600', b'"dur":500')
    assert len(raw) == st.st_size
    p.write_bytes(raw)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(p).st_size == st.st_size and os.stat(p).st_mtime_ns == st.st_mtime_ns
    second = numbers(str(p))
    assert second["compute"] == pytest.approx(first["compute"] - 0.1)  # 500 µs of gemm, not the stale 600


def test_a_hit_gives_the_parsed_numbers(tmp_path, cached):
    p = trace(tmp_path)
    first = numbers(str(p))
    assert os.path.exists(entry_of(p, cached))
    assert numbers(str(p)) == first


def _plant(entry: str, write) -> None:
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    if os.path.lexists(entry):
        os.unlink(entry)
    write(entry)


def _bomb(entry):
    with zipfile.ZipFile(entry, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("ts.npy", "w", force_zip64=True) as f:
            for _ in range(128):
                f.write(b"\0" * (1 << 20))  # 128 MB inflated (over the cap), ~0.1 MB stored


def _wrong_dtype(entry):
    buf = io.BytesIO()
    np.savez(buf, **{k: np.zeros(3, np.float32) for k in cache._COLUMNS},
             **{"mem_" + k: np.zeros(0, np.float32) for k in cache._MEMORY}, info=np.frombuffer(b"{}", np.uint8))
    with open(entry, "wb") as f:
        f.write(buf.getvalue())


@pytest.mark.parametrize("kind", ["empty", "wrong-dtype", "fifo", "zip-bomb", "symlink"])
def test_hostile_entry_is_a_miss(tmp_path, cached, kind):
    p = trace(tmp_path)
    os.environ.pop(cache.ENV)  # the answer: the same trace analysed without a cache
    uncached = numbers(str(p))
    os.environ[cache.ENV] = str(cached)
    target = tmp_path / "elsewhere.npz"
    target.write_bytes(b"")
    writers = {"empty": lambda e: open(e, "wb").close(), "wrong-dtype": _wrong_dtype, "fifo": os.mkfifo,
               "zip-bomb": _bomb, "symlink": lambda e: os.symlink(target, e)}
    _plant(entry_of(p, cached), writers[kind])
    assert numbers(str(p)) == uncached  # a miss, then parsed: no hang on the FIFO, no 128 MB for the bomb


def test_trace_replaced_during_the_parse_is_read_again_and_cached_right(tmp_path, cached, monkeypatch):
    p = trace(tmp_path, 600)
    real = loader._parse_once
    calls = []

    def parse_then_replace(path, helpers):
        t = real(path, helpers)
        if not calls:  # the file is replaced right after its first read
            new = tmp_path / "new.json"
            new.write_bytes(p.read_bytes().replace(b'"dur":600', b'"dur":400'))
            os.replace(new, p)
        calls.append(1)
        return t

    monkeypatch.setattr(loader, "_parse_once", parse_then_replace)
    t = loader.load_trace(str(p))
    assert len(calls) == 2 and any("changed while it was read" in w for w in t.warnings)
    monkeypatch.setattr(loader, "_parse_once", real)
    os.environ.pop(cache.ENV)
    fresh = numbers(str(p))
    os.environ[cache.ENV] = str(cached)
    assert numbers(str(p)) == fresh  # what the cache holds is the new file's numbers, under the new key


def test_trace_that_keeps_changing_is_left_out(tmp_path, monkeypatch):
    p = trace(tmp_path)
    real = loader._parse_once

    def parse_then_touch(path, helpers):
        t = real(path, helpers)
        with open(p, "ab") as f:
            f.write(b" ")
        return t

    monkeypatch.setattr(loader, "_parse_once", parse_then_touch)
    with pytest.raises(TraceError, match="kept changing while it was read"):
        loader.load_trace(str(p))
