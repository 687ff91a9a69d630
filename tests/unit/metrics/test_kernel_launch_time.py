"""Host time in kernel launch calls apart from copies' calls (`LaunchStats.kernel_launch_ms_per_step`): a
synchronous `cudaMemcpy` holds the host for its whole copy, which is not launch overhead, so fusion or CUDA-graph
advice must not read it as such (the fresh review of resnet50_num_workers_4: "launch calls 31 ms/step" counted a
blocking 19 MB pageable input copy). One generated step: 10 kernels launched by 3-us calls, and one copy whose
cudaMemcpy holds the host 5 ms; the answers by construction."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder


def _trace(path):
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 20_000)
    t = 100
    for _ in range(10):
        b.kernel("volta_sgemm_128x64_nn", t + 10, 50, launch=False)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": b.pid, "tid": 1, "ts": b._abs(t),
               "dur": 3, "args": {"External id": b._ext, "correlation": b._corr}})
        t += 100
    b.memcpy(t + 10, 4_900, launch=False)
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "pid": b.pid, "tid": 1, "ts": b._abs(t),
           "dur": 5_000, "args": {"External id": b._ext, "correlation": b._corr}})
    b.write(path)


def test_copies_calls_are_not_launch_time(tmp_path):
    _trace(tmp_path / "rank0.json")
    ls = analyze_path(str(tmp_path), jobs=1, rules=False).ranks[0].launch
    assert ls is not None
    assert ls.launch_ms_per_step == pytest.approx((10 * 3 + 5_000) / 1e3, abs=1e-6)  # every paired call
    assert ls.kernel_launch_ms_per_step == pytest.approx(10 * 3 / 1e3, abs=1e-6)  # the kernels' calls only
