"""The communication table's exposed time per (kind, group) never exceeds what the step holds (issue 36: a
CPU-only trace showed 343.68 ms of exposed all-reduce in a 210.11 ms step). gloo runs collectives on several
threads at once, so summing each op's exposed time counts their shared time twice. Generated gloo rank, one
1,000 µs step: all-reduce spans [100, 800] and [200, 900] µs on two gloo threads, compute [920, 980]: the
exposed communication is their union, 800 µs (the op view would say 1,400 µs)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.views import comm_by_group
from tests.gen.builder import GLOO_TID, MAIN_TID, TraceBuilder


def test_concurrent_gloo_collectives_are_not_counted_twice(tmp_path):
    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    b.thread_name(MAIN_TID, "pt_main_thread")
    b.thread_name(GLOO_TID, "pt_gloo_runloop")
    b.thread_name(GLOO_TID + 1, "pt_gloo_runloop")
    b.step(1, 0, 1000)
    b.gloo("all_reduce", 100, 700, tid=GLOO_TID)
    b.gloo("all_reduce", 200, 700, tid=GLOO_TID + 1)
    b.cpu_op("aten::mm", 920, 60)
    b.write(tmp_path / "rank0.json")
    a = analyze_path(str(tmp_path), jobs=1, rules=False)
    (r,) = a.ranks
    assert r.exposed_comm_ms == pytest.approx(0.8)
    (g,) = [g for g in comm_by_group(a) if g.kind == "allreduce"]
    assert g.time_ms_per_step == pytest.approx(1.4)  # the op view: each op's time
    assert g.exposed_ms_per_step == pytest.approx(0.8) and g.exposed_ms_per_step <= r.step_time_ms
