"""Property tests over the synthetic builder, and a short parser fuzz.

- metrics stay within bounds for arbitrary event sets: ratios in [0, 1], times ≥ 0, a union never exceeds
  the sum of its parts, and the breakdown parts sum to the step time within 1 ns of rounding;
- the parser raises nothing but TraceError (an LlmdiagError) on arbitrary bytes, and the per-rank
  analysis (`run_job`) never raises at all.

The default run is short (max_examples = 200 per test). A long fuzz: see docs/robustness.md
(`LLMDIAG_FUZZ_EXAMPLES=20000 python -m pytest tests/unit/test_properties.py`).
"""

from __future__ import annotations

import gzip
import math
import os
import tempfile

import numpy as np
import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.errors import LlmdiagError, TraceError
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import GLOO_TID, MAIN_TID, TraceBuilder, gpu_rank

EXAMPLES = int(os.environ.get("LLMDIAG_FUZZ_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize="LLMDIAG_FUZZ_SEED" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NS_MS = 1e-6  # one ns in ms
_TMP = tempfile.mkdtemp(prefix="llmdiag-props-")


def _path(name: str) -> str:
    return os.path.join(_TMP, f"{os.getpid()}-{name}")


# ------------------------------------------------------------------------------------------------ intervals

spans = st.lists(st.tuples(st.integers(-10**6, 10**6), st.integers(-1000, 10**5)), max_size=40)


def _arrays(pairs):
    s = np.array([a for a, _ in pairs], np.int64)
    return s, s + np.array([d for _, d in pairs], np.int64)


@SETTINGS
@given(spans, spans)
def test_interval_algebra_bounds(a_pairs, b_pairs):
    a_s, a_e = _arrays(a_pairs)
    b_s, b_e = _arrays(b_pairs)
    a, b = iv.union(a_s, a_e), iv.union(b_s, b_e)
    lengths = np.clip(a_e - a_s, 0, None)
    # union ≤ sum, ≥ the longest piece; sorted and disjoint (touching pieces merged)
    assert iv.total(a) <= int(lengths.sum())
    assert iv.total(a) >= (int(lengths.max()) if len(lengths) else 0)
    assert np.all(a[1] > a[0]) and np.all(a[0][1:] > a[1][:-1])
    inter = iv.intersect_total(a, b)
    assert 0 <= inter <= min(iv.total(a), iv.total(b))
    assert inter == iv.intersect_total(b, a)
    diff = iv.difference(a, b)
    assert iv.total(diff) + inter == iv.total(a)
    assert iv.intersect_total(diff, b) == 0
    both = iv.union_of(a, b)
    assert iv.total(both) == iv.total(a) + iv.total(b) - inter


@SETTINGS
@given(spans, st.integers(-10**6, 10**6), st.integers(0, 10**6))
def test_within_is_intersection_with_the_window(pairs, lo, width):
    """iv.within (the one window clip of idle, overlap, tracks and MoE) is the union's intersection with
    [lo, lo + width]: the same pieces iv.difference leaves of the window's complement, still a union."""
    a = iv.union(*_arrays(pairs))
    hi = lo + width
    got = iv.within(a, lo, hi)
    outside = (np.array([-10**7, hi]), np.array([lo, 10**7]))
    want = iv.difference(a, outside)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


# ------------------------------------------------------------------------------------------------ GPU traces

KINDS = ("compute", "compute", "comm", "memcpy", "memset")


@st.composite
def gpu_traces(draw):
    """Steps and device events at arbitrary (possibly overlapping, zero-length, fractional-ns) times."""
    frac = draw(st.booleans())  # µs with ns fractions, as in ns-resolution traces

    def t(lo, hi):
        return draw(st.integers(lo * 1000, hi * 1000)) / 1000 if frac else draw(st.integers(lo, hi))

    b = TraceBuilder(rank=0, world_size=draw(st.sampled_from([1, 2, 8])))
    n_steps = draw(st.integers(0, 3))
    cur = 0
    for k in range(n_steps):
        length = t(1, 3000)
        b.step(k + 1, cur, cur + length)
        cur = cur + length + draw(st.sampled_from([0, 0, 17]))
    horizon = max(int(cur), 50)
    for _ in range(draw(st.integers(0, 24))):
        kind = draw(st.sampled_from(KINDS))
        start, dur = t(0, horizon + 500), t(0, 1500)
        launch = t(0, horizon)
        stream = draw(st.integers(0, 2)) + (20 if kind == "comm" else 7)
        if kind == "compute":
            b.kernel("void gemm()", start, dur, stream=stream, launch_at=launch)
        elif kind == "comm":
            b.nccl(draw(st.sampled_from(["allreduce", "allgather", "reducescatter"])), start, dur, stream=stream,
                   launch_at=launch, nelems=draw(st.integers(0, 10**7)), group_size=draw(st.sampled_from([None, 2, 8])))
        elif kind == "memcpy":
            b.memcpy(start, dur, stream=stream, launch_at=launch)
        else:
            b.memset(start, dur, stream=stream, launch_at=launch)
    for _ in range(draw(st.integers(0, 4))):
        b.memory(t(0, horizon), draw(st.integers(0, 1 << 40)), draw(st.integers(0, 1 << 40)))
    return b


def _check_bounds(m):
    """The invariants every RankMetrics must satisfy."""
    assert m.steps
    for s in m.steps:
        for v in (s.time_ms, s.compute_ms, s.comm_ms, s.overlapped_comm_ms, s.exposed_comm_ms, s.compute_only_ms,
                  s.other_ms, s.idle_ms):
            assert math.isfinite(v) and v >= 0, s
        assert s.overlapped_comm_ms <= min(s.compute_ms, s.comm_ms) + NS_MS
        assert abs(s.comm_ms - s.overlapped_comm_ms - s.exposed_comm_ms) <= NS_MS
        assert abs(s.compute_ms - s.overlapped_comm_ms - s.compute_only_ms) <= NS_MS
        parts = s.compute_only_ms + s.overlapped_comm_ms + s.exposed_comm_ms + s.other_ms + s.idle_ms
        assert abs(parts - s.time_ms) <= NS_MS, (parts, s)
        if s.comm_ms > 0:
            assert 0.0 <= s.overlap_ratio <= 1.0
        else:
            assert s.overlap_ratio is None
    if m.overlap_ratio is not None:
        assert 0.0 <= m.overlap_ratio <= 1.0
    else:
        assert all(s.comm_ms == 0 for s in m.steps)
    for v in (m.exposed_comm_frac, m.idle_frac):
        assert 0.0 <= v <= 1.0 + 1e-12
    for c in m.comm_by_kind:
        assert c.count > 0 and c.total_ms >= 0 and 0 <= c.overlapped_ms <= c.total_ms + NS_MS
        assert c.overlap_ratio is None or 0.0 <= c.overlap_ratio <= 1.0
        assert c.bytes >= 0 and 0 <= c.sized_count <= c.count
        for bw in (c.algbw_gbps, c.busbw_gbps):
            assert bw is None or (math.isfinite(bw) and bw >= 0)
    shares = [k.share for k in m.top_kernels]
    assert all(0 <= x <= 1 for x in shares) and sum(shares) <= 1 + 1e-9
    h = m.hints
    for v in (h.short_kernel_frac, h.device_idle_frac, h.dataloader_frac, h.fp32_gemm_frac):
        assert v is None or (0 <= v <= 1 + 1e-12)
    for mem in m.memory:
        assert mem.peak_allocated >= 0 and (mem.peak_reserved is None or mem.peak_reserved > 0)


def _analyse(b: TraceBuilder, name: str):
    p = b.write(_path(name))
    out = run_job(RankJob(p))
    assert out.error is None or "internal error" not in out.error, out.error
    return out


@SETTINGS
@given(gpu_traces())
def test_gpu_metrics_within_bounds(b):
    out = _analyse(b, "gpu.json")
    if out.error:  # only possible for an empty trace
        assert "no events" in out.error
        return
    m = out.metrics
    _check_bounds(m)
    # union ≤ sum: per step, compute/comm time never exceeds the summed kernel time inside the window
    base = min(e["ts"] for e in b.events if e.get("ph") == "X") - b.base_us
    origin = math.floor(base)
    evs = [e for e in b.events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    for s in m.steps:
        lo = s.start_ms * 1e3 + origin
        hi = lo + s.time_ms * 1e3
        for kind, total in (("comm", s.comm_ms), ("compute", s.compute_ms)):
            ks = [e for e in evs if ("Collective name" in e["args"]) == (kind == "comm")]
            clipped = sum(max(0.0, min(hi, e["ts"] - b.base_us + e["dur"]) - max(lo, e["ts"] - b.base_us)) for e in ks)
            assert total <= clipped / 1e3 + 2 * NS_MS
    # memory peak is the largest Total Allocated
    mems = [e["args"]["Total Allocated"] for e in b.events if e.get("name") == "[memory]"]
    if mems:
        (mem,) = m.memory
        assert mem.peak_allocated == max(mems)


# ------------------------------------------------------------------------------------------------ CPU traces

CPU_NAMES = ("aten::mm", "aten::add", "c10d::allreduce_", "aten::wait", "autograd::engine::evaluate_function: X",
             "record_param_comms")


@st.composite
def cpu_traces(draw):
    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    if draw(st.booleans()):
        b.thread_name(MAIN_TID, "pt_main_thread")
    n_steps = draw(st.integers(0, 2))
    for k in range(n_steps):
        b.step(k + 1, k * 2000, k * 2000 + draw(st.integers(1, 2000)))
    for _ in range(draw(st.integers(0, 25))):
        tid = draw(st.sampled_from([MAIN_TID, MAIN_TID, MAIN_TID + 1]))  # training and autograd threads
        b.cpu_op(draw(st.sampled_from(CPU_NAMES)), draw(st.integers(0, 4500)), draw(st.integers(0, 1500)), tid=tid)
    for _ in range(draw(st.integers(0, 6))):
        start, dur = draw(st.integers(0, 4500)), draw(st.integers(0, 1500))
        op = draw(st.sampled_from(["all_reduce", "all_gather", "broadcast", "send"]))
        if draw(st.booleans()):
            b.gloo(op, start, dur, dims=draw(st.lists(st.integers(0, 4096), max_size=3)))
        else:  # a gloo span on an unnamed thread of its own
            b.cpu_op(f"gloo:{op}", start, dur, tid=GLOO_TID + 1, cat="user_annotation")
    return b


@SETTINGS
@given(cpu_traces())
def test_cpu_metrics_within_bounds(b):
    out = _analyse(b, "cpu.json")
    if out.error:
        assert "no events" in out.error
        return
    m = out.metrics
    assert m.trace_kind == "cpu"
    _check_bounds(m)


# ------------------------------------------------------------------------------------------------ parser fuzz

_GOOD = gpu_rank(0, steps=2).to_bytes()


@st.composite
def mutated_traces(draw):
    """A valid trace, cut, spliced or with bytes replaced; sometimes gzipped (maybe then cut)."""
    data = bytearray(_GOOD)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "delete"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "cut":
            data = data[:i]
        elif op == "flip":
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[i:i] = draw(st.sampled_from([b"\xff", b"\x00", b'"', b",", b"{", b"]", b"1e999", b"-", b"\\u0000",
                                              b"\xed\xa0\x80", b"NaN", b"[" * 50]))
        else:
            del data[i:i + draw(st.integers(1, 20))]
    data = bytes(data)
    if draw(st.booleans()):
        data = gzip.compress(data)
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
    return data


def _parse_only_trace_errors(data: bytes, name: str):
    p = _path(name)
    with open(p, "wb") as f:
        f.write(data)
    try:
        load_trace(p)
    except TraceError as e:
        assert isinstance(e, LlmdiagError)
        line = e.line()
        assert line.startswith("llmdiag: ") and "\n" not in line
    out = run_job(RankJob(p))  # the whole per-rank analysis never raises, and never hits a bug
    assert out.error is None or out.error.startswith("llmdiag: ")
    assert out.error is None or "internal error" not in out.error, out.error
    if out.metrics is not None:
        _check_bounds(out.metrics)


@SETTINGS
@given(st.binary(max_size=2048))
def test_parser_arbitrary_bytes(data):
    _parse_only_trace_errors(data, "bytes.json")


@SETTINGS
@given(mutated_traces())
def test_parser_mutated_traces(data):
    _parse_only_trace_errors(data, "mutated.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
FIELDS = ("ph", "name", "cat", "ts", "dur", "pid", "tid", "args", "s", "id")


@st.composite
def structured_traces(draw):
    """Valid JSON of the right outline, with arbitrary values where Kineto writes numbers and strings."""
    events = []
    for _ in range(draw(st.integers(0, 12))):
        e = {k: draw(json_values) for k in draw(st.sets(st.sampled_from(FIELDS)))}
        if draw(st.booleans()):
            e["ph"] = draw(st.sampled_from(["X", "i", "M"]))
        if draw(st.booleans()):
            e["ts"] = draw(st.floats(-1e20, 1e20) | st.integers(-(2**63), 2**63 - 1))
        events.append(e)
    base = orjson.loads(_GOOD)
    doc = {"traceEvents": base["traceEvents"] + events if draw(st.booleans()) else events}
    for k in ("distributedInfo", "deviceProperties", "host_name"):
        if draw(st.booleans()):
            doc[k] = draw(json_values)
    return orjson.dumps(doc)


@SETTINGS
@given(structured_traces())
# Found by the long fuzz: every `ts`/`dur` of a column an array of equal length (numpy then builds a 2-D column).
@example(data=b'{"traceEvents":[{},{"cat":null,"ph":"X","ts":0.0,"name":null,"dur":[]}]}')
@example(data=b'{"traceEvents":[{"ph":"X","ts":[],"name":null,"dur":[null,null]}]}')
@example(data=b'{"traceEvents":[{"ph":"X","ts":false,"name":"a","dur":[null,null]}]}')
def test_parser_structured_garbage(data):
    _parse_only_trace_errors(data, "structured.json")


# The substring prefilters in front of the classification regexes must never change an answer.
_NAME_PARTS = st.sampled_from(["Memcpy", "memcpy", "hipMemcpy", "dma", "CopyDeviceToHost", "Memset", "FillBuffer",
                               "Sync", "sync", "cudaDeviceSynchronize", "Event Sync", "Stream Wait", "STREAM WAIT",
                               "c10d::", "_c10d_functional::", "record_param_comms", "nccl:", "gloo:",
                               "torch.distributed", "ProcessGroup", "aten::wait", "wait_tensor", "_dtensor::",
                               "sgemm", "GEMM", "_f32_", "float_float", "cutlass", "simt", "DataLoader",
                               "dataloader", "__next__", "void", "<", ">", " ", "::", "x"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_NAME_PARTS | st.text(max_size=6), max_size=8).map("".join))
def test_prefiltered_regexes_answer_as_the_regex(name):
    from llmdiag.diagnose.metrics.rank import classify
    from llmdiag.diagnose.metrics.rank import kernels

    for pred, rx in ((classify.is_memcpy, classify.MEMCPY_RE), (classify.is_memset, classify.MEMSET_RE),
                     (classify.is_sync_kernel, classify.SYNC_KERNEL_RE), (classify.is_host_comm, classify.HOST_COMM_RE),
                     (kernels.is_dataloader, kernels.DATALOADER_RE)):  # fp32 GEMMs: tests/unit/metrics/test_precision.py
        assert pred(name) == (rx.search(name) is not None), (rx.pattern, name)
