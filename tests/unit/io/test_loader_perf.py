"""The streaming loader: pieces cut anywhere give the same RankTrace as one whole parse; odd layouts and
malformed files still end in one TraceError line naming the file. No timing assertions here (benchmarks/)."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import orjson
import pytest

from llmdiag.diagnose.io import fastjson
from llmdiag.diagnose.io import stream as tracestream
from llmdiag.diagnose.errors import TraceError
from llmdiag.diagnose.io.loader import load_trace, read_bytes
from tests.gen.builder import gpu_rank

COLUMNS = ("ts", "dur", "name", "cat", "thread", "stream", "corr", "ext")
MEMORY = ("ts", "device_type", "device_id", "allocated", "reserved", "bytes", "thread")


def same(a, b) -> None:
    for k in COLUMNS:
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    for k in MEMORY:
        assert np.array_equal(getattr(a.memory, k), getattr(b.memory, k)), k
    for k in ("names", "cats", "threads", "thread_names", "comm_args", "meta", "origin_us", "rank", "warnings",
              "bytes_read"):
        assert getattr(a, k) == getattr(b, k), k


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Pieces of a few hundred bytes and reads of 7 bytes: every boundary case is hit many times."""
    def set_(chunk=300, read=7):
        monkeypatch.setattr(tracestream, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(tracestream, "READ_BYTES", read)
    return set_


@pytest.fixture(params=["orjson", "msgspec"])
def backend(request, monkeypatch):
    assert fastjson.decoder() is not None, "msgspec is a dependency (pyproject.toml)"
    if request.param == "orjson":
        monkeypatch.setattr(fastjson, "_DECODER", None)
    return request.param


def rich() -> "gpu_rank":
    """A GPU rank with every event kind the loader reads, and strings that look like event boundaries."""
    b = gpu_rank(steps=3, device_properties=[{"id": 0, "name": "H100", "totalGlobalMem": 80 << 30}])
    b.thread_name(100, "main}, {thread")
    b.cpu_op('aten::weird},{"ph": "X"}', 50, 5, args={"nested": [{"a": 1}, {"b": {"c": "},"}}], "Input Dims": [[2]]})
    b.gloo("all_reduce", 1000, 50, dims=[1000])
    b.memory(60, allocated=1 << 30, reserved=2 << 30, nbytes=4096)
    b.memory(70, allocated=None, nbytes=-4096)
    b.kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 2100, 50, stream=20,
             args={"Collective name": "allgather", "In msg nelems": 10, "Out msg nelems": 20, "dtype": "BFloat16",
                   "Group size": 2, "Process Group Name": "1", "Process Group Description": "mesh_dp"})
    b.raw({"ph": "s", "id": 5, "pid": b.pid, "tid": 100, "ts": b._abs(10), "cat": "ac2g", "name": "ac2g"})
    b.raw({"ph": "X", "cat": "kernel", "name": "no_args", "pid": 0, "tid": 7, "ts": b._abs(20), "dur": 1})
    b.extra["INFO"] = ["CuptiActivityProfiler.cpp:976] tracing ] }] ,", "x"]
    return b


def layouts(b) -> dict[str, bytes]:
    """The same trace as different writers lay it out."""
    head, events = b.header(), b.events
    compact = orjson.dumps({**head, "traceEvents": events})
    pretty = json.dumps({**head, "traceEvents": events}, indent=2).encode()
    first = json.dumps({"traceEvents": events, **head}).encode()  # the array first, the header after it
    spaced = b"{" + b", ".join(json.dumps(k).encode() + b": " + json.dumps(v).encode() for k, v in head.items())
    spaced += b', "traceEvents": [' + b"\r\n ,".join(json.dumps(e).encode() + b" " for e in events) + b"]}"
    return {"compact": compact, "pretty": pretty, "array-first": first, "space-before-comma": spaced}


@pytest.mark.parametrize("layout", ["compact", "pretty", "array-first", "space-before-comma"])
@pytest.mark.parametrize("chunk", [64, 300, 4096])
def test_pieces_anywhere_equal_one_parse(tmp_path, tiny_chunks, backend, layout, chunk):
    data = layouts(rich())[layout]
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    whole = load_trace(str(path))
    tiny_chunks(chunk, read=7)
    same(load_trace(str(path)), whole)
    assert whole.comm_args and len(whole.memory.ts) == 2 and whole.thread_names


@pytest.mark.parametrize("wrap", ["gzip", "gzip-twice", "two-members", "zero-padding"])
def test_gzip_variants_stream(tmp_path, tiny_chunks, wrap):
    raw = orjson.dumps(rich().to_dict())
    data = {"gzip": gzip.compress(raw), "gzip-twice": gzip.compress(gzip.compress(raw)),
            "two-members": gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]),
            "zero-padding": gzip.compress(raw) + b"\0" * 9}[wrap]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data)
    assert read_bytes(str(path)) == raw
    plain = tmp_path / "plain.json"
    plain.write_bytes(raw)
    tiny_chunks(256, read=5)
    a, b = load_trace(str(path)), load_trace(str(plain))
    b.path = a.path
    same(a, b)


def test_bare_array_and_empty_events(tmp_path, tiny_chunks):
    b = rich()
    (tmp_path / "bare.json").write_bytes(orjson.dumps(b.events))
    (tmp_path / "empty.json").write_bytes(b'{"schemaVersion": 1, "traceEvents": [ ], "distributedInfo": {"rank": 3}}')
    tiny_chunks(200)
    assert len(load_trace(str(tmp_path / "bare.json"))) == sum(e["ph"] == "X" for e in b.events)
    e = load_trace(str(tmp_path / "empty.json"))
    assert len(e) == 0 and e.rank == 3


def test_nested_traceevents_key_is_not_taken(tmp_path, tiny_chunks):
    b = rich()
    doc = b'{"meta": {"traceEvents": []}, "traceEvents": ' + orjson.dumps(b.events) + b"}"
    (tmp_path / "t.json").write_bytes(doc)
    tiny_chunks(200)
    t = load_trace(str(tmp_path / "t.json"))
    assert len(t) == sum(e["ph"] == "X" for e in b.events) and t.meta == {"meta": {"traceEvents": []}}


def test_invalid_utf8_in_a_middle_piece(tmp_path, tiny_chunks, backend):
    raw = orjson.dumps(rich().to_dict()).replace(b"void gemm_kernel<float>()", b"void gemm_\xe4\xb8kernel\xff<float>()")
    (tmp_path / "t.json").write_bytes(raw)
    tiny_chunks(300)
    t = load_trace(str(tmp_path / "t.json"))
    assert any("\ufffd" in n for n in t.names)
    assert any("UTF-8" in w for w in t.warnings)


@pytest.mark.parametrize("chunk", [200, 1 << 20])
@pytest.mark.parametrize("cut", ["truncated", "garbage", "no-close", "not-json", "empty", "no-events"])
def test_malformed_is_one_line_naming_the_file(tmp_path, tiny_chunks, chunk, cut):
    raw = orjson.dumps(rich().to_dict())
    data = {"truncated": raw[: len(raw) * 2 // 3], "garbage": raw[:500] + b"\x00#!garbage" + raw[500:],
            "no-close": raw[: raw.rfind(b"]")], "not-json": b"<html>nope</html>", "empty": b"  \n",
            "no-events": b'{"schemaVersion": 1}'}[cut]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    tiny_chunks(chunk)
    with pytest.raises(TraceError) as e:
        load_trace(str(path))
    line = e.value.line()
    assert line.startswith(f"llmdiag: {path}: ") and "\n" not in line


def test_big_malformed_file_fails_without_whole_parse(tmp_path, tiny_chunks, monkeypatch):
    """Past WHOLE_LIMIT the streamed error is final: a broken 1 GB trace is not re-read into memory."""
    raw = orjson.dumps(rich().to_dict())
    path = tmp_path / "bad.json"
    path.write_bytes(raw[: len(raw) - 40])
    tiny_chunks(200)
    monkeypatch.setattr(tracestream, "WHOLE_LIMIT", 100)
    monkeypatch.setattr(tracestream.Stream, "whole", lambda self: pytest.fail("re-parsed whole"))
    with pytest.raises(TraceError, match="truncated JSON"):
        load_trace(str(path))


def test_gzip_cut_off_mid_stream(tmp_path, tiny_chunks):
    raw = orjson.dumps(rich().to_dict())
    good, bad = tmp_path / "good.json.gz", tmp_path / "bad.json.gz"
    good.write_bytes(gzip.compress(raw))
    bad.write_bytes(gzip.compress(raw)[:-30])
    tiny_chunks(300, read=64)
    assert len(load_trace(str(good))) > 0
    with pytest.raises(TraceError, match="corrupt gzip data"):
        load_trace(str(bad))


def test_generated_trace_same_on_both_backends(tmp_path, tiny_chunks, monkeypatch):
    from benchmarks.generate import write_rank

    path = str(tmp_path / "rank0.pt.trace.json.gz")
    write_rank(path, 0, 2, 300_000, steps=2)
    fast = load_trace(path)
    monkeypatch.setattr(fastjson, "_DECODER", None)
    same(load_trace(path), fast)
    assert os.path.getsize(path) > 0


def test_parse_cache(tmp_path, monkeypatch):
    from llmdiag.diagnose.io import cache
    from llmdiag.diagnose.io import loader

    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps(rich().to_dict()))
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    first = load_trace(str(path))
    assert len(os.listdir(tmp_path / "cache")) == 1
    real_parse = loader._parse
    monkeypatch.setattr(loader, "_parse", lambda p: pytest.fail("parsed again"))
    same(load_trace(str(path)), first)
    path.write_bytes(orjson.dumps(gpu_rank(steps=1).to_dict()))  # changed file: a miss
    monkeypatch.setattr(loader, "_parse", real_parse)
    assert len(load_trace(str(path))) < len(first)
    monkeypatch.delenv(cache.ENV)
    assert cache.directory() is None


def test_dict_view_fast_path_is_taken():
    """The per-event slow path is for malformed pieces only: plain Kineto dicts take the C-level maps."""
    from llmdiag.diagnose.io.columns import Columns as _Columns, _DictView

    assert _DictView.field([{"ph": "X"}, {"ph": "i"}], "ph") == ["X", "i"]
    cols = _Columns()
    cols.add(rich().events)
    assert cols.bad == 0 and cols.n > 0


# ------------------------------------------------------------------------------- one file, several processes
def _refuse(piece):  # module level: the helpers get it by name
    from llmdiag.diagnose.io import split_parse

    raise split_parse._BadPiece


@pytest.fixture
def split_always(monkeypatch):
    from llmdiag.diagnose.io import loader

    monkeypatch.setattr(loader, "SPLIT_MIN_BYTES", 0)


@pytest.mark.parametrize("layout", ["compact", "pretty", "array-first", "space-before-comma"])
@pytest.mark.parametrize("chunk", [64, 300, 4096])
def test_split_parse_equals_one_process(tmp_path, tiny_chunks, backend, split_always, layout, chunk):
    """Raw pieces decoded by forked helpers and merged (split_parse.py) give the serial columns exactly,
    including names holding `}, ` and `},{` that a raw cut must not split at (or must fall back from)."""
    b = rich()
    b.kernel("void k<{lambda()#1}, at::A<2>, {x}>(X),{\"ph\": \"X\"}", 2500, 5, stream=7)
    path = tmp_path / "rank0.json"
    path.write_bytes(layouts(b)[layout])
    serial = load_trace(str(path))
    tiny_chunks(chunk, read=7)
    same(load_trace(str(path), helpers=2), serial)  # split, or (a cut inside those names) its fallback


def test_split_parse_of_a_generated_rank_and_its_fallback(tmp_path, tiny_chunks, split_always, monkeypatch):
    from benchmarks.generate import write_rank
    from llmdiag.diagnose.io import split_parse

    path = str(tmp_path / "rank0.pt.trace.json.gz")
    write_rank(path, 0, 2, 400_000, steps=2)
    serial = load_trace(path)
    tiny_chunks(4096)
    assert split_parse.parse_split(path, 2) is not None
    same(load_trace(path, helpers=2), serial)

    monkeypatch.setattr(split_parse, "_decode", _refuse)  # a cut inside a string: the serial parse takes over
    assert split_parse.parse_split(path, 2) is None
    same(load_trace(path, helpers=2), serial)


def test_split_parse_bad_input_reads_as_serial(tmp_path, tiny_chunks, split_always):
    """Invalid UTF-8 is replaced and counted the same way; a truncated file gives the serial error."""
    from benchmarks.generate import write_rank

    raw = orjson.dumps(rich().to_dict()).replace(b"void gemm_kernel<float>()", b"void gemm_\xe4\xb8kernel\xff<float>()")
    (tmp_path / "t.json").write_bytes(raw)
    tiny_chunks(300)
    serial = load_trace(str(tmp_path / "t.json"))
    same(load_trace(str(tmp_path / "t.json"), helpers=2), serial)
    assert any("UTF-8" in w for w in serial.warnings)
    head = orjson.dumps(rich().to_dict()).replace(b'"H100"', b'"H1\xff00"')  # in the header, parsed by this process
    (tmp_path / "h.json").write_bytes(head)
    serial = load_trace(str(tmp_path / "h.json"))
    same(load_trace(str(tmp_path / "h.json"), helpers=2), serial)
    assert any("UTF-8" in w for w in serial.warnings)
    path = str(tmp_path / "rank0.pt.trace.json.gz")
    write_rank(path, 0, 2, 200_000, steps=2)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(TraceError) as serial_err:
        load_trace(path)
    with pytest.raises(TraceError) as split_err:
        load_trace(path, helpers=2)
    assert str(split_err.value) == str(serial_err.value)
