"""The views HTA and TraceLens users reached for and llmdiag lacked (issue 36): each event's args, the launch
queue over time and the time blocked on a full queue, time by user annotation, time by nn.Module. Each is
checked against answers worked out by hand on a trace built here, and on the real traces against HTA's own
numbers or a plain-Python reading of the raw JSON that shares no code with llmdiag."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from llmdiag.diagnose.export.events import events
from llmdiag.diagnose.export.views import annotations, modules, queue_blocked, queue_length
from tests.gen.builder import TraceBuilder

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
NCCL = REAL / "hta" / "nccl_data.json.gz"
RESNET = REAL / "tracelens" / "mi300_resnet18_no_caching_allocator.json.gz"
BASE = 1_000_000  # the builder's base_us: ts_us below is BASE + offset


def _queue_trace(tmp_path) -> str:
    """Stream 7: launches at 0, 10, 20; kernels start at 30, 35, 40 (5 µs each). Stream 20: launched at 5,
    started at 50. Queue on 7: 1 @0, 2 @10, 3 @20, 2 @30, 1 @35, 0 @40; on 20: 1 @5, 0 @50."""
    b = TraceBuilder(base_us=BASE)
    b.step(1, 0, 100)
    for launch, start in ((0, 30), (10, 35), (20, 40)):
        b.kernel("gemm", start, 5, stream=7, launch_at=launch)
    b.kernel("copy", 50, 2, stream=20, launch_at=5, cat="gpu_memcpy")
    return b.write(tmp_path / "rank0.json")


def test_queue_length_by_hand(tmp_path):
    q = queue_length(_queue_trace(tmp_path))
    s7 = q[q.stream == 7]
    assert (s7.ts_us - BASE).tolist() == [0, 10, 20, 30, 35, 40]
    assert s7.queue_length.tolist() == [1, 2, 3, 2, 1, 0]
    s20 = q[q.stream == 20]
    assert (s20.ts_us - BASE).tolist() == [5, 50] and s20.queue_length.tolist() == [1, 0]
    assert set(s7.tid) == {"7"} and set(s7.pid) == {"0"}


def test_blocked_on_a_full_queue_by_hand(tmp_path):
    """max_queue 3: stream 7 holds 3 from 20 to 30 µs; the trace's starts span 0..50 µs (HTA's duration)."""
    b = queue_blocked(_queue_trace(tmp_path), max_queue=3)
    row = b[b.stream == 7].iloc[0]
    assert row.blocked_us == pytest.approx(10) and row.blocked_frac == pytest.approx(10 / 50)
    assert b[b.stream == 20].iloc[0].blocked_us == 0
    two = queue_blocked(_queue_trace(tmp_path), max_queue=2)  # 2 or more: 10..35
    assert two[two.stream == 7].iloc[0].blocked_us == pytest.approx(25)


def test_two_changes_at_one_time_keep_the_value_after_both(tmp_path):
    """A launch and a start at the same µs: one point, holding the value after both (HTA's last row there)."""
    b = TraceBuilder(base_us=BASE)
    b.kernel("a", 10, 5, stream=7, launch_at=0)
    b.kernel("b", 20, 5, stream=7, launch_at=10)  # launched when a starts
    q = queue_length(b.write(tmp_path / "r.json"))
    assert (q.ts_us - BASE).tolist() == [0, 10, 20] and q.queue_length.tolist() == [1, 1, 0]


def _annotation_trace(tmp_path) -> str:
    """Two gpu spans "fwd" on stream 7 ([0, 100) and [200, 260)), one "opt" ([300, 310)); kernels on 7 at
    10..40, 90..120 (30 µs, 10 inside the first span), 210..230; one on stream 9 inside "fwd"'s time (not its
    stream). Device time inside: fwd = 30 + 10 + 20 = 60; opt = 0."""
    b = TraceBuilder(base_us=BASE)
    for name, start, dur in (("fwd", 0, 100), ("fwd", 200, 60), ("opt", 300, 10)):
        b.annotation(name, start, dur)
        b.kernel(name, start, dur, stream=7, cat="gpu_user_annotation", launch=False)
    b.kernel("k1", 10, 30, stream=7, launch_at=5)
    b.kernel("k2", 90, 30, stream=7, launch_at=6)
    b.kernel("k3", 210, 20, stream=7, launch_at=205)
    b.kernel("other_stream", 20, 50, stream=9, launch_at=7)
    return b.write(tmp_path / "rank0.json")


def test_annotations_by_hand(tmp_path):
    path = _annotation_trace(tmp_path)
    a = annotations(path).set_index("name")
    assert list(a.index) == ["fwd", "opt"]
    fwd = a.loc["fwd"]
    assert (fwd.spans, fwd.sum_us, fwd.mean_us, fwd.min_us, fwd.max_us) == (2, 160, 80, 60, 100)
    assert fwd.std_us == pytest.approx(math.sqrt(((100 - 80) ** 2 + (60 - 80) ** 2) / 1))
    assert fwd.device_us == pytest.approx(60)
    assert a.loc["opt"].device_us == 0 and a.loc["opt"].std_us == 0  # one span: 0, as HTA writes it
    host = annotations(path, gpu=False).set_index("name")
    assert host.loc["fwd"].sum_us == 160 and math.isnan(host.loc["fwd"].device_us)


def _module_trace(tmp_path) -> str:
    """Model_0 [0, 100) holding Linear_0 [10, 40) and Linear_1 [50, 90); Linear_0 called again at [200, 220)
    outside the model. Kernels launched at 15 (20 µs), 55 (30 µs), 95 (model only, 5 µs), 205 (7 µs), 300 (none)."""
    b = TraceBuilder(base_us=BASE)
    for name, start, dur in (("Model_0", 0, 100), ("Linear_0", 10, 30), ("Linear_1", 50, 40), ("Linear_0", 200, 20)):
        b.cpu_op(f"nn.Module: {name}", start, dur, cat="python_function")
    for launch, dur in ((15, 20), (55, 30), (95, 5), (205, 7), (300, 9)):
        b.kernel(f"k{launch}", launch + 400, dur, stream=7, launch_at=launch)
    return b.write(tmp_path / "rank0.json")


def test_modules_by_hand(tmp_path):
    m = modules(_module_trace(tmp_path)).set_index("module")
    assert m.loc["Model_0"][["type", "depth", "calls", "host_us", "device_events", "device_us"]].tolist() == \
        ["Model", 0, 1, 100, 3, 55]
    assert m.loc["Linear_0"][["type", "depth", "calls", "host_us", "device_events", "device_us"]].tolist() == \
        ["Linear", 1, 2, 50, 2, 27]
    assert m.loc["Linear_1"][["depth", "calls", "device_events", "device_us"]].tolist() == [1, 1, 1, 30]
    assert list(m.index) == ["Model_0", "Linear_1", "Linear_0"]  # by device time


def test_no_module_spans_is_an_empty_table(tmp_path):
    assert len(modules(_queue_trace(tmp_path))) == 0


def test_events_with_args(tmp_path):
    b = TraceBuilder(base_us=BASE)
    b.cpu_op("aten::mm", 5, 10, args={"Input Dims": [[2, 3], [3, 4]], "Sequence number": 7})
    b.cpu_op("aten::mm", 5, 10, args={"Input Dims": [[9]]})  # same start: file order kept
    b.kernel("gemm", 30, 5, stream=7, launch_at=6)
    b.raw({"ph": "X", "name": "no_args", "pid": 1, "tid": 1, "ts": BASE + 1, "dur": 1})
    path = b.write(tmp_path / "rank0.json")
    df = events(path, args=True)
    got = {(r.name, r.ts_us): json.loads(r.args) for r in df.itertuples()}
    assert [json.loads(x)["Input Dims"] for x in df[df.name == "aten::mm"].args] == [[[2, 3], [3, 4]], [[9]]]
    assert got[("no_args", BASE + 1)] == {}
    k = json.loads(df[df.name == "gemm"].args.iloc[0])
    assert k["stream"] == 7 and k["correlation"] == df[df.name == "gemm"].correlation.iloc[0]
    assert "args" not in events(path).columns  # opt-in: the default reads the trace once
    t = events(path, args=True, pandas=False)
    assert t.column("args").to_pylist() == df.args.tolist()


# ---- the real traces: HTA's numbers, and the raw JSON read with nothing of llmdiag -----------------------------

LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
            "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream"}


def _raw(path) -> list[dict]:
    return [e for e in json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.real(NCCL)
def test_real_queue_length_against_the_raw_json():
    ev = _raw(NCCL)
    first_call: dict = {}
    for e in sorted((e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")), key=lambda e: e["ts"]):
        c = e.get("args", {}).get("correlation")
        if c is not None and c >= 0:
            first_call.setdefault(c, e)
    changes = defaultdict(list)
    for e in ev:
        a = e.get("args", {})
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and a.get("correlation") in first_call:
            call = first_call[a["correlation"]]
            if call["name"] in LAUNCHES:
                changes[a["stream"]] += [(call["ts"], 1), (e["ts"], -1)]
    want = {}
    for s, ch in changes.items():
        ch.sort(key=lambda x: x[0])
        n, pts = 0, {}
        for ts, d in ch:
            n += d
            pts[ts] = n  # the value after every change at that time
        want[s] = sorted(pts.items())
    got = queue_length(str(NCCL))
    assert sorted(want) == sorted(set(got.stream))
    for s, pts in want.items():
        g = got[got.stream == s]
        assert len(g) == len(pts), s
        assert max(abs(a - b) for a, (b, _) in zip(g.ts_us, pts)) < 1e-3
        assert g.queue_length.tolist() == [v for _, v in pts]
    assert got.queue_length.max() == 10  # stream 7, a real backlog (HTA's series has the same max)


@pytest.mark.real(NCCL)
@pytest.mark.filterwarnings("ignore:The inplace keyword")  # HTA 0.5's own pandas calls
def test_real_annotations_against_hta():
    """HTA's TraceAnalysis drops the last ProfilerStep unless told not to; with it kept both read the whole
    trace. HTA holds start and end as whole µs, so a span's duration may differ by up to 2 µs."""
    import logging
    import shutil
    import tempfile

    pytest.importorskip("hta")
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(NCCL, Path(d) / "rank0.json.gz")
        logging.disable(logging.WARNING)
        try:
            ta = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
            kw = dict(visualize=False, duration_ratio=1.0, num_kernels=10**6)
            hta = {gpu: ta.get_gpu_user_annotation_breakdown(use_gpu_annotation=gpu, **kw) for gpu in (True, False)}
        finally:
            logging.disable(logging.NOTSET)
    for gpu, h in hta.items():
        mine = annotations(str(NCCL), gpu=gpu).set_index("name")
        h = h.set_index("name")
        assert sorted(mine.index) == sorted(h.index), gpu
        for name, r in h.iterrows():
            m = mine.loc[name]
            n = m.spans
            assert abs(m.sum_us - r["sum (us)"]) <= 2 * n + 1e-6, (gpu, name)
            for mine_col, hta_col in (("mean_us", "mean (us)"), ("min_us", "min (us)"), ("max_us", "max (us)"),
                                      ("std_us", "stddev")):
                assert abs(m[mine_col] - r[hta_col]) <= 2 + 1e-6, (gpu, name, mine_col)
    fwd = annotations(str(NCCL)).set_index("name").loc["nccl:all_reduce"]
    assert 0 < fwd.device_us <= fwd.sum_us  # NCCL kernels fill their own annotation spans


@pytest.mark.real(RESNET)
def test_real_modules_against_the_raw_json():
    """ResNet-18 forward with module spans: each module's launches counted from the raw JSON (launch call on the
    module's thread inside its span, its kernel's duration) agree with the view."""
    ev = _raw(RESNET)
    dev = {e["args"]["correlation"]: e["dur"] for e in ev
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {})}
    calls = [e for e in ev if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in dev]
    want: dict = defaultdict(lambda: [0, 0.0, 0.0])
    for m in (e for e in ev if str(e.get("name", "")).startswith("nn.Module: ")):
        inside = [c for c in calls if c["tid"] == m["tid"] and c["pid"] == m["pid"]
                  and m["ts"] <= c["ts"] < m["ts"] + m["dur"]]
        w = want[m["name"][len("nn.Module: "):]]
        w[0] += len(inside)
        w[1] += sum(dev[c["args"]["correlation"]] for c in inside)
        w[2] += m["dur"]
    got = modules(str(RESNET)).set_index("module")
    assert sorted(got.index) == sorted(want)
    for name, (k, us, host) in want.items():
        g = got.loc[name]
        assert g.device_events == k and g.device_us == pytest.approx(us, abs=1e-3) and \
            g.host_us == pytest.approx(host, abs=1e-3), name
    root = got[got.depth == 0]
    assert list(root.index) == ["ResNet_0"] and root.iloc[0].device_events > 50


@pytest.mark.real(RESNET)
def test_real_events_args_line_up_with_the_raw_json():
    df = events(str(RESNET), args=True)
    ev = _raw(RESNET)
    assert len(df) == len(ev)
    by_corr = {e["args"]["correlation"]: e["args"] for e in ev if e.get("cat") == "kernel"}
    k = df[df.cat == "kernel"]
    assert len(k) == len(by_corr)
    assert all(json.loads(a) == by_corr[c] for a, c in zip(k.args, k.correlation))


def test_views_read_an_analysis_as_well_as_a_path(tmp_path):
    """`llmdiag.analyze_path(...)` first, then a view of one of its ranks: the rank's own trace file is read."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.errors import LlmdiagError

    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2, base_us=BASE)
        b.step(1, 0, 100)
        for k in range(r + 1):  # rank 1 launches twice
            b.kernel("gemm", 30 + 10 * k, 5, stream=7, launch_at=k)
        b.write(tmp_path / f"rank{r}.json")
    a = analyze_path(str(tmp_path), rules=False, jobs=1)
    q = queue_length(a, rank=1)
    assert q.queue_length.tolist() == [1, 2, 1, 0]
    assert q.equals(queue_length(str(tmp_path), rank=1))
    assert len(events(a, rank=0)) == len(events(str(tmp_path / "rank0.json")))
    with pytest.raises(LlmdiagError, match="no rank 5 in this analysis"):
        queue_length(a, rank=5)
