"""Gradient accumulation in the analyzer: microsteps per optimizer step from the `llmdiag/forward` labels,
data-parallel traffic per optimizer step split into per-microstep gathers and once-per-step reductions, and the
accum_fsdp_regather rule. Generated GPU traces with the answer written out here; a real CPU run in test_moe.py
checks that the workloads train the same with --grad-accum."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder

LAYERS, AG_US, RS_US, FWD_US, BWD_US, STEP_US = 4, 40, 60, 300, 600, 20_000


def _fsdp_rank(rank: int, microsteps: int, steps: int = 2) -> TraceBuilder:
    """FSDP-style rank: per microstep a forward (all-gather of each layer, then its GEMM) and a backward (GEMM);
    after the last microstep one reduce-scatter per layer. All collectives on their own stream, not overlapped."""
    b = TraceBuilder(rank=rank, world_size=2)
    for k in range(steps):
        k0 = k * STEP_US
        b.step(k + 1, k0, k0 + STEP_US)
        t = k0 + 100
        for _ in range(microsteps):
            b.annotation("llmdiag/forward", t - 50, 20)
            for _ in range(LAYERS):
                # FSDP2's own record_function span around the gather: how a real trace shows the wrapper
                # (without it the group's role is unknown and nothing is counted as data parallel).
                b.annotation("FSDP::all_gather", t - 45, 10)
                b.nccl("allgather", t, AG_US, stream=20, launch_at=t - 40, nelems=1 << 16, group_size=2,
                       pg_ranks=[0, 1])
                b.kernel("void gemm_kernel<float>()", t + AG_US, FWD_US, stream=7, launch_at=t - 39)
                t += AG_US + FWD_US
            b.annotation("llmdiag/backward", t - 30, 20)
            b.kernel("void gemm_kernel<float>()", t, BWD_US, stream=7, launch_at=t - 29)
            t += BWD_US
        for _ in range(LAYERS):
            b.nccl("reducescatter", t, RS_US, stream=20, launch_at=t - 10, nelems=1 << 16, group_size=2,
                   pg_ranks=[0, 1])
            t += RS_US
    return b


def _analyse(tmp_path, microsteps: int):
    for r in range(2):
        _fsdp_rank(r, microsteps).write(tmp_path / f"rank{r}.pt.trace.json")
    return analyze_path(str(tmp_path))


@pytest.mark.parametrize("n", [2, 4])
def test_microsteps_and_traffic_per_optimizer_step(tmp_path, n):
    a = _analyse(tmp_path, n)
    acc = a.accum
    assert acc.microsteps == n and acc.source == "labels"
    assert acc.allgather_ms_per_step == pytest.approx(n * LAYERS * AG_US / 1000)
    assert acc.reduce_ms_per_step == pytest.approx(LAYERS * RS_US / 1000)
    assert acc.dp_ops_per_step == n * LAYERS + LAYERS
    f = next(f for f in a.findings if f.id == "accum_fsdp_regather")
    assert f.gain_ms == pytest.approx(n * LAYERS * AG_US / 1000 * (n - 1) / n)
    assert f.gain_kind == "bound"
    # Terminal and report print the same accumulation figures.
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.diagnose.model.moe_view import accum_cards
    from llmdiag.reports.render import render_html

    text, html = render(a, width=200), render_html(a)
    assert 'id="accum"' in html
    for label, value, _ in accum_cards(acc):
        assert f"  {label}: {value}" in text and f">{value}<" in html


def test_parameters_kept_gathered_are_not_a_finding(tmp_path):
    """Only the first microstep gathers (what --accum-keep-gathered does): nothing re-gathered, no finding."""
    for r in range(2):
        b = _fsdp_rank(r, 4)
        b.events = [e for e in b.events if not (e.get("name", "").startswith("ncclKernel_AllGather")
                                                 and _microstep_of(b, e) > 0)]
        b.write(tmp_path / f"rank{r}.pt.trace.json")
    a = analyze_path(str(tmp_path))
    assert a.accum.microsteps == 4 and a.accum.regather_ms_per_step == 0
    assert a.accum.allgather_ms_per_step == pytest.approx(LAYERS * AG_US / 1000)
    assert "accum_fsdp_regather" not in [f.id for f in a.findings]


def _microstep_of(b: TraceBuilder, event: dict) -> int:
    """Index of the microstep a device event falls in (forward labels start 50 µs before their microstep)."""
    starts = sorted(e["ts"] for e in b.events if e.get("name") == "llmdiag/forward")
    step = [s for s in starts if s <= event["ts"]]
    k = len(step) - 1
    return k % 4


def test_one_forward_per_step_is_not_accumulation(tmp_path):
    a = _analyse(tmp_path, 1)
    assert a.accum is None
    assert "accum_fsdp_regather" not in [f.id for f in a.findings]


@pytest.mark.parametrize("n", [1, 2])
def test_device_side_copies_of_the_label_are_not_microsteps(tmp_path, n):
    """On CUDA, record_function also writes each `llmdiag/forward` as a `gpu_user_annotation` on the device
    (seen on an H200 run of `single`: 'microsteps: 2' without --grad-accum). Only the host spans count."""
    for r in range(2):
        b = _fsdp_rank(r, n)
        for e in [e for e in b.events if e.get("name") == "llmdiag/forward"]:
            b.raw({"ph": "X", "cat": "gpu_user_annotation", "name": "llmdiag/forward", "pid": b.device, "tid": 7,
                   "ts": e["ts"] + 5, "dur": e["dur"], "args": {"External id": 1}})
        b.write(tmp_path / f"rank{r}.pt.trace.json")
    a = analyze_path(str(tmp_path))
    if n == 1:
        assert a.accum is None
    else:
        assert a.accum.microsteps == n and a.accum.source == "labels"
