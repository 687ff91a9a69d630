"""Steps in every schema generation, and the DataLoader wait inside its step (issue 27, kineto's resnet50 samples).

`ProfilerStep#N` is written under `Operator` (the 2021 schema, with `Kernel`/`Runtime` categories), `cpu_op`
(torch 1.8-1.9) or `user_annotation` (later): each is a step, and none is a host op (device idle under nothing
but the step span is not host-bound). A step whose host fetches its batch (DataLoader `__next__`) before its
first launch has that wait in its device window. Answers are placed by hand in the generated traces.
"""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SCHEMAS = {  # step category, op category, runtime category, kernel category
    "2021": ("Operator", "Operator", "Runtime", "Kernel"),
    "torch1.9": ("cpu_op", "cpu_op", "cuda_runtime", "kernel"),
    "current": ("user_annotation", "cpu_op", "cuda_runtime", "kernel"),
}


def _trace(schema: str, steps: int = 3) -> TraceBuilder:
    """Step k: host [k0, k0+1000]; kernels [k0+100, k0+300] and [k0+500, k0+700], the second launched at k0+500
    (the gap [k0+300, k0+500] has no host event but the step span); `aten::relu` [k0+20, k0+60] launches the
    first at k0+30. Device window [k0+100, k0+700]: 600 µs, idle 200 µs, none of it host-bound."""
    step_cat, op_cat, rt_cat, k_cat = SCHEMAS[schema]
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, steps + 1):
        k0 = (k - 1) * 1000
        b.cpu_op(f"ProfilerStep#{k}", k0, 1000, cat=step_cat)
        b.cpu_op("aten::relu", k0 + 20, 40, cat=op_cat)
        b.kernel("relu_kernel", k0 + 100, 200, launch_at=k0 + 30, cat=k_cat)
        b.kernel("gemm_kernel", k0 + 500, 200, launch_at=k0 + 500, cat=k_cat)
    for e in b.events:
        if e["cat"] == "cuda_runtime":
            e["cat"] = rt_cat
    return b


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_profiler_steps_of_every_category_are_steps(tmp_path, schema):
    a = analyze_path(_trace(schema).write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1)
    r = a.ranks[0]
    assert [s.step for s in r.steps] == [1, 2, 3]
    assert r.step_time_ms == pytest.approx(0.6)
    assert r.idle.idle_ms == pytest.approx(0.2)
    assert r.idle.host_bound_ms == pytest.approx(0.0, abs=1e-9)  # the step span is no host op
    assert not any("no ProfilerStep" in i.message for i in a.issues)


def _fetching(tmp_path, dataloader: bool) -> object:
    """Step k: host [k0, k0+1000]; with `dataloader`, `__next__` [k0, k0+400]; one kernel launched at k0+410,
    running [k0+420, k0+920]. With the fetch the window is [k0, k0+920] (the fetch's start: the previous window
    ended at k0-80), 400 µs of it under the DataLoader; without, the window is the kernel alone."""
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(1, 4):
        k0 = (k - 1) * 1000
        b.step(k, k0, k0 + 1000)
        if dataloader:
            b.cpu_op(DL, k0, 400)
        b.kernel("conv_kernel", k0 + 420, 500, launch_at=k0 + 410)
    return analyze_path(b.write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1)


def test_dataloader_wait_is_in_its_step(tmp_path):
    a = _fetching(tmp_path, dataloader=True)
    r = a.ranks[0]
    assert r.step_time_ms == pytest.approx(0.92)
    assert r.idle.idle_ms == pytest.approx(0.42)
    assert r.idle.dataloader_ms == pytest.approx(0.4)
    assert r.idle.edge_ms == 0
    f = next(f for f in a.findings if f.id == "dataloader")
    assert f.gain_ms == pytest.approx(0.4, abs=1e-3)
    assert "host_bound" not in {f.id for f in a.findings}


def test_no_fetch_keeps_the_kernel_window(tmp_path):
    """The twin: no DataLoader span, so the window begins at the step's first kernel, as before."""
    r = _fetching(tmp_path, dataloader=False).ranks[0]
    assert r.step_time_ms == pytest.approx(0.5) and r.idle.idle_ms == pytest.approx(0.0, abs=1e-9)
