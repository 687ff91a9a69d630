"""fp32 GEMM gain where the host sets the step (the fresh review of resnet50_num_workers_{0,4}: a host that never
waits for its GPU, which idles 20-35 % of the step, gets ~0 ms from faster GEMMs, not 15 ms). Generated V100 steps:
the host launches 20 fp32 GEMMs of 200 us in a 0.4 ms burst (the GPU runs them back to back: each one's successor
is queued before it ends, but the burst's last one, whose successor is launched after it ended: 19 of 20 on the
path), then works 6 ms on the host with no kernel, then launches one 10-us kernel. Without a sync the host never
waits: the GEMMs' 3.8 ms on the path × (1 − 1/4) = 2.85 ms saving cannot shorten the step, so the gain is the
host's waits, 0. The twin waits for the GPU in a `cudaDeviceSynchronize` of 3.61 ms after the burst: then the bound
is min(2.85 ms, 3.61 ms) = 2.85 ms; simulated on the dependency graph it is exact: the sync returns when the last
GEMM ends, and 20 GEMMs at 50 us (launched every 20 us, so still back to back) end 20 × 150 us = 3.0 ms sooner.
Answers by construction."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

V100 = [{"name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 16945709056}]


def _trace(path, sync: bool):
    b = TraceBuilder(rank=0, world_size=1, device_properties=V100)
    t = 0
    for n in range(4):
        step = 10_400 if sync else 6_800
        b.step(n + 1, t, t + step)
        for k in range(20):  # launched every 20 us, run back to back from 10 us
            b.kernel("volta_sgemm_128x64_tn", t + 10 + 200 * k, 200, launch_at=t + 20 * k)
        host = t + 400
        if sync:
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": b.pid, "tid": 1,
                   "ts": b._abs(host), "dur": 3_610, "args": {}})
            host += 3_610
        b.cpu_op("aten::host_work", host, step - (host - t) - 400)
        b.kernel("vectorized_elementwise_kernel", t + step - 390, 10, launch_at=t + step - 400)  # the step's end
        t += step
    b.write(path)


def _fp32(d):
    fs = [f for f in analyze_path(str(d), jobs=1).findings if f.id == "fp32_gemm"]
    assert len(fs) == 1
    return fs[0]


def test_no_gemm_gain_where_the_host_never_waits(tmp_path):
    _trace(tmp_path / "free" / "rank0.json", sync=False)
    f = _fp32(tmp_path / "free")
    assert f.gain_ms == pytest.approx(0.0, abs=1e-6) and f.severity == "low"
    assert "the host sets the step" in f.evidence.text


def test_the_gain_is_bounded_by_the_hosts_waits(tmp_path):
    _trace(tmp_path / "sync" / "rank0.json", sync=True)
    f = _fp32(tmp_path / "sync")
    want = 3.0 if f.gain_kind == "simulated" else 2.85
    assert f.gain_ms == pytest.approx(want, abs=1e-3) and f.severity in ("medium", "high")
    assert "host sets the step" not in f.evidence.text
