"""A GPU trace whose `[memory]` events are all CPU-side (Device Type 0) recorded no device memory: its device
peak is "not recorded" (None), never the CPU's few bytes shown as the GPU's peak. A CPU (gloo) trace's peak is
its CPU's."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.terminal import render
from llmdiag.reports.render import render_html
from tests.gen.builder import MAIN_TID, cpu_rank, gpu_rank

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 80 << 30}]


def _analyse(tmp_path, b):
    b.write(tmp_path / "run" / f"rank{b.rank}.json")
    return analyze_path(str(tmp_path / "run"), jobs=1)


def test_cpu_side_memory_only_is_not_a_device_peak(tmp_path):
    b = gpu_rank(world_size=1, device_properties=H100)
    b.memory(50, 8, nbytes=8, device_type=0, device_id=-1, tid=MAIN_TID)  # the 8 B of a CPU scalar
    b.memory(60, 0, nbytes=-8, device_type=0, device_id=-1, tid=MAIN_TID)
    a = _analyse(tmp_path, b)
    (r,) = a.ranks
    assert [m.device for m in r.memory] == ["cpu"]  # the CPU row is kept, labelled cpu
    assert r.memory_peak is None and a.aggregate.memory_peak_max is None
    text = " ".join(render(a).split())  # prose wraps at the terminal's width
    assert "device memory peak not recorded" in text and "memory peak 8" not in text
    assert "device memory not recorded" in render_html(a)


def test_device_side_memory_is_the_peak(tmp_path):
    """The twin: the same trace with device events; the device's peak, not the CPU's larger one."""
    b = gpu_rank(world_size=1, device_properties=H100)
    b.memory(50, 1 << 20, nbytes=1 << 20, device_type=0, device_id=-1)
    b.memory(55, 4096, reserved=1 << 21, nbytes=4096, device_type=1, device_id=0)
    a = _analyse(tmp_path, b)
    assert a.ranks[0].memory_peak == 4096 and a.aggregate.memory_peak_max == 4096
    assert "not recorded" not in render(a)


def test_cpu_trace_keeps_its_cpu_peak(tmp_path):
    b = cpu_rank(world_size=1)
    b.memory(50, 3 << 20, nbytes=3 << 20, device_type=0, device_id=-1)
    a = _analyse(tmp_path, b)
    assert a.ranks[0].memory_peak == 3 << 20


@pytest.mark.real
def test_real_mi300_trace_with_cpu_memory_events_only():
    """tracelens/mi300_resnet18_no_caching_allocator: 210 [memory] events, every one Device Type 0 (counted here
    from the JSON), peak Total Allocated 8 B: no device peak."""
    import gzip
    import json
    from pathlib import Path

    src = Path(__file__).resolve().parents[3].parent / "shared/fixtures/real/tracelens" / \
        "mi300_resnet18_no_caching_allocator.json.gz"
    with gzip.open(src) as f:
        mem = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    assert mem and {e["args"].get("Device Type") for e in mem} == {0}
    a = analyze_path(str(src), jobs=1)
    assert a.ranks[0].memory_peak is None and a.aggregate.memory_peak_max is None
