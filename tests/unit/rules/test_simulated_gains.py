"""Rules whose gain is a graph edit read the simulated what-if (ranks[].simulated_gain_ms) and say so, and keep their
bound where a summary has none. Answers worked out by hand from the placed times (µs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.analysis import CommGroupStats
from llmdiag.diagnose.rules import findings
from llmdiag.diagnose.rules.comm_gain import simulated as comm_simulated
from tests.gen.builder import TraceBuilder

PERIOD = 7100


def _pageable_copies(steps: int = 3) -> TraceBuilder:
    """Per step (k0 = 7100·k): aten::copy_ [k0, k0+6003] holds a synchronous `cudaMemcpy` [k0+1000, k0+6000] whose
    own copy runs [k0+1000, k0+1002] (pageable: the host stages it, the device idles under the call); aten::mm
    [k0+6003, k0+7100] launches a GEMM at k0+7000 that runs [k0+7010, k0+8010]; the next step begins at k0+7100.
    The host is in an op all the time."""
    b = TraceBuilder()
    for k in range(steps):
        k0 = PERIOD * k
        b.step(k + 1, k0, k0 + PERIOD)
        b.cpu_op("aten::copy_", k0, 6003)
        b.kernel("Memcpy DtoH (Device -> Pageable)", k0 + 1000, 2, cat="gpu_memcpy", launch_at=k0 + 1000)
        b.events[-2].update(name="cudaMemcpy", dur=5000)  # the launch call is the blocking copy
        b.cpu_op("aten::mm", k0 + 6003, 1097)
        b.kernel("gemm_kernel", k0 + 7010, 1000, launch_at=k0 + 7000)
    return b


def test_host_sync_simulated(tmp_path):
    """Without the wait the copy call returns at its begin (k0+1000) instead of k0+6000; everything after it on the
    host thread moves 5000 µs earlier, so does the next step's start (the device, idle, never holds it): each
    period loses 5 ms."""
    a = analyze_path(_pageable_copies().write(tmp_path / "rank0.pt.trace.json.gz"), jobs=1)
    assert a.ranks[0].simulated_gain_ms["host_sync"] == pytest.approx(5.0)
    (f,) = [f for f in a.findings if f.id == "host_sync"]
    assert f.gain_kind == "simulated" and f.gain_ms == pytest.approx(5.0)
    assert "simulated on the rank's dependency graph" in f.expected_gain and f.expected_gain.startswith("≈")
    a.ranks[0].simulated_gain_ms = {}  # a summary without the what-if: the idle under the calls, a bound
    (f,) = [f for f in findings(a) if f.id == "host_sync"]
    assert f.gain_kind == "bound" and "upper bound" in f.expected_gain and f.expected_gain.startswith("up to")


def _cs(kind: str, pg: str) -> CommGroupStats:
    return CommGroupStats(kind, pg, 1, 1.0, 0.0, 0.0, 0, 0, None, None, 2)


def _r(sim: dict, rows: list) -> SimpleNamespace:
    return SimpleNamespace(simulated_gain_ms=sim, comm_by_kind=rows, compute_only_ms=3.0)


def test_comm_what_if_matches_the_rules_collectives_exactly():
    """A rule's rows of a rank are all its communication: "comm"; all of one group's: "comm:<pg>"; part of a
    group, or of two groups but not all: no simulation (None, the bound stays). The gain is capped by the
    compute-only time (3 ms) and loses the waits for late peers."""
    dp_ar, dp_ag, tp_ar = _cs("allreduce", "dp"), _cs("allgather", "dp"), _cs("allreduce", "tp")
    r = _r({"comm": 5.0, "comm:dp": 2.0, "comm:tp": 1.5}, [dp_ar, dp_ag, tp_ar])
    assert comm_simulated(r, [dp_ar, dp_ag, tp_ar], 0.0) == 3.0  # all: 5 capped by 3
    assert comm_simulated(r, [dp_ar, dp_ag, tp_ar], 2.5) == 2.5  # 5 − 2.5 of waits
    assert comm_simulated(r, [dp_ar, dp_ag], 0.0) == 2.0
    assert comm_simulated(r, [tp_ar], 1.0) == 0.5
    assert comm_simulated(r, [dp_ar], 0.0) is None  # part of group dp
    assert comm_simulated(_r({"comm": 5.0}, [dp_ar, dp_ag, tp_ar]), [dp_ar, dp_ag], 0.0) is None  # not simulated
