"""A long host op the device idles under, told apart by what its thread records inside it (issue 27, torchrec
qcomm rank 2: a 21.7 ms `_AlltoAllSingle` with 3 child events and 20.2 ms with none): a stretch with nothing
recorded is a host stall no profiled op accounts for; an op whose children fill it, or a leaf op, is its own
host work. Each answer is placed by hand in the generated trace."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

OP = "_AlltoAllSingle"


def _trace(children: str) -> TraceBuilder:
    """Per step: 30 launched kernels (~1 ms), then `OP` [k0+1000, k0+21000] holding the device idle 20 ms, then a
    kernel it launches at its end. `children`: "few" = 3 child ops of 100 µs at its start (19.7 ms with none),
    "dense" = a 900 µs child every 1 ms (gaps of 100 µs), "none" = a leaf op."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, 4):
        k0 = (k - 1) * 30_000
        for i in range(30):
            b.cpu_op("aten::mul", k0 + 30 * i, 20)
            b.kernel("elementwise_kernel", k0 + 30 * i + 25, 30, launch_at=k0 + 30 * i + 19)
        b.cpu_op(OP, k0 + 1000, 20_000)
        kids = {"few": [(k0 + 1000 + 100 * j, 100) for j in range(3)],
                "dense": [(k0 + 1000 + 1000 * j, 900) for j in range(20)], "none": []}[children]
        for s, d in kids:
            b.cpu_op("aten::empty", s, d)
        b.kernel("gemm_kernel", k0 + 21_010, 500, launch_at=k0 + 21_000)
        b.step(k, k0 - 10, k0 + 22_000)
    return b


@pytest.mark.parametrize("children, unrecorded_ms, stall", [("few", 19.7, True), ("dense", 0.1, False),
                                                              ("none", 0.0, False)])
def test_a_stretch_with_nothing_recorded_is_a_stall(tmp_path, children, unrecorded_ms, stall):
    a = analyze_path(_trace(children).write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1)
    held = [s for s in a.ranks[0].idle.stretches if s.cause == "host"]
    assert [s.op for s in held] == [OP] * 3
    assert [s.unrecorded_ms for s in held] == pytest.approx([unrecorded_ms] * 3)
    (f,) = [f for f in a.findings if f.id == "host_op_stall"]
    text = f.evidence.text + " " + f.action
    assert ("unprofiled host time" in text and "no profiled op accounts for" in f.action) is stall
    assert ("host work inside" in f.action) is not stall
    assert f"`{OP}`" in f.action
