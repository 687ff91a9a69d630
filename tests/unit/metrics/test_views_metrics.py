"""The HTA / TraceLens views (issue 28 item 8) against answers the tests compute themselves: generated traces
with known launches, kernels and shapes (op → kernel rows, launch delays, queue lengths, achieved TFLOP/s and
roofline class), and a real trace's kernel counts per op read by a small independent gzip+json pass."""

from __future__ import annotations

import gzip
import json
import os
import statistics
from collections import defaultdict

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 85_000_000_000}]
BF16 = "c10::BFloat16"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REAL = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "real")

# (host op or None, its host start, its dur, Input Dims, kernel name, launch µs, kernel start µs, kernel dur µs)
MM_DIMS = [[256, 512], [512, 1024]]
ADDMM_DIMS = [[1024], [128, 512], [512, 1024], [], []]
SDPA_DIMS = [[2, 8, 1024, 64], [2, 8, 1024, 64], [2, 8, 1024, 64]]
SPEC = [
    ("aten::mm", 10, 30, MM_DIMS, "gemm_a", 20, 100, 50),
    ("aten::mm", 200, 30, MM_DIMS, "gemm_a", 210, 300, 50),
    ("aten::add", 400, 20, [[4], [4]], "add_kernel", 415, 500, 5),
    ("aten::add", 430, 20, [[4], [4]], "add_kernel2", 440, 510, 8),
    ("aten::_scaled_dot_product_flash_attention", 600, 50, SDPA_DIMS, "flash_fwd", 610, 700, 200),
    (None, None, None, None, "orphan_kernel", 900, 950, 20),
    ("aten::addmm", 1010, 80, ADDMM_DIMS, "gemm_b", 1020, 1200, 40),
]


def _build(device=H100) -> TraceBuilder:
    b = TraceBuilder(rank=0, world_size=1, device_properties=device)
    b.step(1, 0, 5000)
    b.cpu_op("aten::linear", 1000, 100, args={"Input type": [BF16, BF16, BF16], "Input Dims": [[128, 512], [1024, 512], [1024]]})
    for op, h0, hd, dims, kname, launch, start, dur in SPEC:
        if op:
            b.cpu_op(op, h0, hd, args={"Input type": [BF16] * len(dims), "Input Dims": dims})
        b.kernel(kname, start, dur, launch_at=launch)
    return b


def _rank(tmp_path, b):
    """The rank's metrics, with the job's op → kernel and roofline rows (one rank: its own) as `ops`, `roof`."""
    d = tmp_path / "run"
    b.write(d / "rank0.json")
    a = analyze_path(str(d), rules=False, jobs=1)
    (m,) = a.ranks
    kv = a.kernel_views
    m.ops, m.roof = (kv.ops, kv.roofline) if kv else ([], [])
    return m


def test_op_kernel_rows(tmp_path):
    m = _rank(tmp_path, _build())
    want = defaultdict(lambda: [0, 0, [], set()])  # op -> count, total µs, delays, kernels
    for op, _, _, _, kname, launch, start, dur in SPEC:
        w = want[op or "(no host op)"]
        w[0] += 1
        w[1] += dur
        w[2].append(start - launch)
        w[3].add(kname)
    got = {o.op: o for o in m.ops}
    assert set(got) == set(want)
    for op, (n, tot, delays, kernels) in want.items():
        o = got[op]
        assert (o.count, o.ranks, o.max_rank) == (n, 1, 0), op
        assert o.total_ms == pytest.approx(tot / 1e3) and o.mean_us == pytest.approx(tot / n)
        assert o.ms_per_step == pytest.approx(tot / 1e3) == o.max_rank_ms  # one step, one rank
        assert o.launch_delay_us == pytest.approx(sum(delays) / n)
        assert o.kernel in kernels
    named = [o.op for o in m.ops if o.op != "(no host op)"]
    assert named == sorted(named, key=lambda op: -want[op][1])  # most device time first
    assert got["aten::add"].kernel == "add_kernel2"  # the one with more time


def test_op_kernel_rows_are_bounded(tmp_path):
    """More ops than kept: the top ones by time, the rest in one '(other ops)' row holding their sum (cut once in
    the rank's worker, once over the job)."""
    from llmdiag.diagnose.metrics.job.kernel_world import WORLD_TOP
    from llmdiag.diagnose.metrics.rank.op_kernels import TOP_OPS

    n = TOP_OPS + 5
    b = TraceBuilder(rank=0, world_size=1, device_properties=H100)
    b.step(1, 0, 60000)
    for k in range(n):
        b.cpu_op(f"aten::op{k}", 100 * k, 50)
        b.kernel(f"k{k}", 5000 + 1000 * k, 10 + k, launch_at=100 * k + 5)
    m = _rank(tmp_path, b)
    top = min(TOP_OPS, WORLD_TOP)
    assert [o.op for o in m.ops[:top]] == [f"aten::op{k}" for k in range(n - 1, n - 1 - top, -1)]
    other = m.ops[top]
    assert other.op == "(other ops)" and other.count == n - top
    assert other.total_ms == pytest.approx(sum(10 + k for k in range(n - top)) / 1e3)
    assert len(m.ops) == top + 1


def _roof(dims, name):
    """FLOPs and bytes of one call, worked out here from the shapes (bf16: 2 bytes an element)."""
    if name == "aten::mm":
        (mm, k), (_, n) = dims
        return 2 * mm * n * k, 2 * (mm * k + k * n + mm * n)
    if name == "aten::addmm":
        (bias,), (mm, k), (_, n) = dims[0], dims[1], dims[2]
        return 2 * mm * n * k, 2 * (bias + mm * k + k * n + mm * n)
    bsz, h, s, d = dims[0]
    return 4 * bsz * h * s * s * d, 2 * 4 * bsz * h * s * d  # q, k, v and the output


def test_roofline_rows(tmp_path):
    m = _rank(tmp_path, _build())
    peak_tflops, peak_gbps = 989.5, 3350.0  # H100 SXM datasheet, dense bf16 and HBM3
    got = {x.op: x for x in m.roof}
    assert set(got) == {"aten::mm", "aten::addmm", "aten::_scaled_dot_product_flash_attention"}  # not aten::add
    for op, dims, calls, kernel_us in (("aten::mm", MM_DIMS, 2, 100), ("aten::addmm", ADDMM_DIMS, 1, 40),
                                       ("aten::_scaled_dot_product_flash_attention", SDPA_DIMS, 1, 200)):
        flops, nbytes = _roof(dims, op)
        x = got[op]
        assert (x.calls, x.dtype, x.ranks) == (calls, "bf16", 1)
        assert x.kernel_ms == pytest.approx(kernel_us / 1e3)
        assert x.gflop == pytest.approx(calls * flops / 1e9) and x.gbytes == pytest.approx(calls * nbytes / 1e9)
        assert x.tflops == pytest.approx(calls * flops / (kernel_us * 1e-6) / 1e12)
        assert x.intensity == pytest.approx(flops / nbytes)
        assert x.peak_frac == pytest.approx(x.tflops / peak_tflops)
        ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)
        assert x.bound == ("compute" if flops / nbytes > ridge else "memory"), op
    assert got["aten::mm"].bound == "memory" and got["aten::_scaled_dot_product_flash_attention"].bound == "compute"


def test_roofline_unknown_device_names_no_class(tmp_path):
    m = _rank(tmp_path, _build(device=[{"name": "Some Future GPU", "computeMajor": 12, "computeMinor": 0}]))
    assert m.roof and all(x.bound == "" and x.peak_tflops is None and x.peak_frac is None for x in m.roof)
    assert all(x.tflops is not None for x in m.roof)  # achieved is still measured


def test_attention_backward_counts_two_and_a_half(tmp_path):
    b = TraceBuilder(rank=0, world_size=1, device_properties=H100)
    b.step(1, 0, 5000)
    dims = [[2, 8, 1024, 64]] * 4  # grad_out, q, k, v
    b.cpu_op("aten::_scaled_dot_product_flash_attention_backward", 10, 50, args={"Input type": [BF16] * 4, "Input Dims": dims})
    b.kernel("flash_bwd", 100, 500, launch_at=20)
    (x,) = _rank(tmp_path, b).roof
    assert x.gflop == pytest.approx(2.5 * 4 * 2 * 8 * 1024 * 1024 * 64 / 1e9)


def test_launch_stats_and_queue(tmp_path):
    """Stream 7: five kernels launched back to back (10..14 µs), started at 100, 200, ..., 500: just after each
    launch the queue is 1..5, after each start 4..0 (max 5, mean 2.5). Stream 8: one kernel (1 then 0)."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=H100)
    b.step(1, 0, 2000)
    launches, starts = [10, 11, 12, 13, 14], [100, 200, 300, 400, 500]
    for at, s in zip(launches, starts):
        b.kernel("k", s, 50 if s < 500 else 5, stream=7, launch_at=at)
    b.kernel("k8", 700, 30, stream=8, launch_at=650)
    m = _rank(tmp_path, b)
    L = m.launch
    delays = [s - at for at, s in zip(launches, starts)] + [50]
    assert L.launches == 6 and L.launches_per_step == 6
    assert L.delay_median_us == pytest.approx(statistics.median(delays))
    assert L.delay_max_us == pytest.approx(max(delays))
    assert L.launch_ms_per_step == pytest.approx(6 * 1 / 1e3)  # each launch call lasts 1 µs
    q = {x.stream: x for x in L.queue}
    assert (q[7].max, q[7].mean, q[7].samples) == (5, pytest.approx(2.5), 10)
    assert (q[8].max, q[8].mean) == (1, pytest.approx(0.5))
    assert L.queue[0].stream == 7 and L.queue_max == 5
    assert m.hints.short_kernel_frac == pytest.approx(1 / 6)  # the one 5 µs kernel


def test_cpu_trace_has_no_views(tmp_path):
    b = TraceBuilder(rank=0, world_size=1, backend="gloo")
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 10, 500, args={"Input type": ["float", "float"], "Input Dims": [[8, 8], [8, 8]]})
    m = _rank(tmp_path, b)
    assert m.ops == [] and m.roof == [] and m.launch is None  # no kernel_views at all


@pytest.mark.real
def test_real_kernel_counts_per_op():
    """hta/nccl_data: device events per innermost enclosing cpu_op, counted by a plain pass over the JSON (the
    launch call by correlation id, launched inside a ProfilerStep; the innermost cpu_op on the launching thread
    containing the call): every named row agrees exactly, and '(other ops)' holds the rest."""
    path = os.path.join(REAL, "hta", "nccl_data.json.gz")
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    ops = defaultdict(list)
    for e in ev:
        if e.get("cat") == "cpu_op":
            ops[(e["pid"], e["tid"])].append(e)
    count = defaultdict(int)
    for e in ev:
        r = launch.get(e.get("args", {}).get("correlation")) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else None
        if r is None or not any(a <= r["ts"] < b for a, b in steps):
            continue
        inner = [o for o in ops[(r["pid"], r["tid"])] if o["ts"] <= r["ts"] <= o["ts"] + o["dur"]]
        if inner:
            count[min(inner, key=lambda o: (o["dur"], -o["ts"]))["name"]] += 1
    kv = analyze_path(path, rules=False, jobs=1).kernel_views
    named = {o.op: o.count for o in kv.ops if not o.op.startswith("(")}
    assert len(named) >= 5 and named == {op: count[op] for op in named}
    other = sum(o.count for o in kv.ops if o.op == "(other ops)")
    assert other == sum(count.values()) - sum(named.values())


def test_op_rows_sum_over_ranks(tmp_path):
    """Rank r runs r + 1 steps of 1000 µs, each with aten::mm launching a (100 + 50·r) µs kernel 30 µs after
    its call: per step the job spends Σ_r (100 + 50·r) µs in aten::mm, rank 2 the most; roofline rows sum the
    ranks' calls and FLOPs."""
    d = tmp_path / "run"
    for r in range(3):
        b = TraceBuilder(rank=r, world_size=3, device_properties=H100)
        for k in range(1, r + 2):
            k0 = (k - 1) * 1000
            b.step(k, k0, k0 + 1000)
            b.cpu_op("aten::mm", k0 + 10, 30, args={"Input type": [BF16, BF16], "Input Dims": MM_DIMS})
            b.kernel("gemm_a", k0 + 50, 100 + 50 * r, launch_at=k0 + 20)
        b.write(d / f"rank{r}.json")
    kv = analyze_path(str(d), rules=False, jobs=1).kernel_views
    (o,) = kv.ops
    assert (o.op, o.ranks, o.count, o.max_rank) == ("aten::mm", 3, 1 + 2 + 3, 2)
    assert o.ms_per_step == pytest.approx(sum(100 + 50 * r for r in range(3)) / 1e3)
    assert o.max_rank_ms == pytest.approx(0.2) and o.launch_delay_us == pytest.approx(30)
    assert o.total_ms == pytest.approx(sum((r + 1) * (100 + 50 * r) for r in range(3)) / 1e3)
    (x,) = kv.roofline
    flops, _ = _roof(MM_DIMS, "aten::mm")
    assert (x.ranks, x.calls) == (3, 6) and x.tflops == pytest.approx(6 * flops / (o.total_ms * 1e-3) / 1e12)


def test_float_gemm_on_tensor_cores_is_tf32(tmp_path):
    """An aten::mm of float inputs whose kernel name says TF32 (CUTLASS tensorop s1688): the TF32 peak and ridge
    (A100 80GB: 156 TFLOP/s over 2,039 GB/s, ridge 76.5 FLOP/B), not fp32's (19.5 TFLOP/s, ridge 9.6)."""
    b = TraceBuilder(rank=0, world_size=1, device_properties=[{"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8}])
    b.step(1, 0, 5000)
    dims = [[64, 4096], [4096, 2798]]
    b.cpu_op("aten::mm", 10, 30, args={"Input type": ["float", "float"], "Input Dims": dims})
    b.kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align1>()", 100, 500, launch_at=20)
    (x,) = _rank(tmp_path, b).roof
    flops, nbytes = 2 * 64 * 4096 * 2798, 4 * (64 * 4096 + 4096 * 2798 + 64 * 2798)
    assert x.dtype == "tf32" and x.intensity == pytest.approx(flops / nbytes)
    assert 9.6 < flops / nbytes < 76.5 and x.bound == "memory"
    assert x.peak_frac == pytest.approx(flops / 500e-6 / 1e12 / 156.0)


def test_stream_idle_split_by_host_wait(tmp_path):
    """Stream 7: kernels [100, 200], [300, 400] launched at 250, [500, 550] launched at 20: gaps 100 µs (50 before
    its launch: host wait) and 100 µs (launched long before: other). Stream 8: [1000, 1010], [1100, 1110] launched
    at 1050: a 90 µs gap, 40 of it host wait. Two ranks, rank 1 with every time doubled."""
    d = tmp_path / "run"
    for r in range(2):
        f = r + 1
        b = TraceBuilder(rank=r, world_size=2, device_properties=H100)
        b.step(1, 0, 5000)
        for start, dur, at, stream in ((100, 100, 10, 7), (300, 100, 250, 7), (500, 50, 20, 7),
                                       (1000, 10, 900, 8), (1100, 10, 1050, 8)):
            b.cpu_op("aten::op", f * at - 1, 2)
            b.kernel("k", f * start, f * dur, stream=stream, launch_at=f * at)
        b.write(d / f"rank{r}.json")
    kv = analyze_path(str(d), rules=False, jobs=1).kernel_views
    got = {s.stream: s for s in kv.streams}
    s7, s8 = got[7], got[8]
    assert (s7.ranks, s7.max_rank) == (2, 1) and [x.stream for x in kv.streams] == [7, 8]
    assert s7.idle_ms == pytest.approx((0.2 + 0.4) / 2) and s7.host_wait_ms == pytest.approx((0.05 + 0.1) / 2)
    assert s7.other_ms == pytest.approx(s7.idle_ms - s7.host_wait_ms) and s7.max_rank_ms == pytest.approx(0.4)
    assert s8.idle_ms == pytest.approx((0.09 + 0.18) / 2) and s8.host_wait_ms == pytest.approx((0.04 + 0.08) / 2)
