"""low_busbw on a rank whose host sets the step (diagnose/rules/comm_host_set.py): a slow all-reduce nothing waits
on is stated with the bound it may cost once the host no longer sets the step, its gain now ~0; silent where the
device sets the step. Expected numbers are written out by hand from the placed ones."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import summary, typed

STEPS = 3
BW = 10.0  # GB/s, far below H100's 360 (NVLink 4): the manifest says the group is inside one node
TOTAL, OVERLAPPED = 14.0, 12.0  # per step: 2 ms of it exposed


def _job(idle_frac: float, comm_on_path_pct: float) -> dict:
    """2 ranks of ~100 ms steps, one all-reduce row each (100 MiB messages at 10 GB/s), a critical path of the
    step's length whose communication share is `comm_on_path_pct`, the host's waits known (0 ms)."""
    s = summary(2)
    for r in s["ranks"]:
        c = r["comm_by_kind"][0]
        c.update(total_ms=TOTAL * STEPS, overlapped_ms=OVERLAPPED * STEPS, overlap_ratio=OVERLAPPED / TOTAL,
                 busbw_gbps=BW, algbw_gbps=BW, group_size=2)
        r["hints"].update(device_idle_frac=idle_frac, host_wait_ms=0.0)
        r["critical_path"] = {"length_ms": r["step_time_ms"], "cpu_bound": 100.0 - 5.0 - comm_on_path_pct,
                              "gpu_compute_bound": 5.0, "gpu_communication_bound": comm_on_path_pct,
                              "gpu_kernel_launch_overhead": 0.0, "gpu_kernel_kernel_overhead": 0.0}
    return s


def test_host_set_slow_allreduce_states_the_later_bound():
    """The path holds 0.5 % of ~100 ms = ~0.5 ms of communication: now 0.5 x (1 - 10 / 288) = ~0.48 ms, under
    the 1 % floor; once the host no longer sets the step: 14 x (1 - 10 / 288) = 13.51 ms (target 80 % of 360)."""
    f = {f.id: f for f in run_rules(typed(_job(0.6, 0.5)))}["low_busbw"]
    assert f.severity == "low" and f.gain_kind == "bound"
    assert f.gain_ms == pytest.approx(0.5 * (1 - BW / 288.0), rel=0.03)
    assert f"up to {14.0 * (1 - BW / 288.0):.2f} ms per step" in f.expected_gain
    assert "the host sets the step" in f.evidence.text and "costs the step nothing now" in f.evidence.text


def test_device_set_step_is_silent():
    """The same collective off the path, the device idle 5 % of the step: the host does not set it, no later bound."""
    assert "low_busbw" not in {f.id for f in run_rules(typed(_job(0.05, 0.5)))}


def test_on_the_path_keeps_the_plain_gain():
    """The path holds all of its 2 ms of exposed time: the plain gain, 2 x (1 - 10 / 288), no later words."""
    f = {f.id: f for f in run_rules(typed(_job(0.6, 10.0)))}["low_busbw"]
    assert f.gain_ms == pytest.approx(2.0 * (1 - BW / 288.0), rel=1e-3) and "once it no longer" not in f.expected_gain
