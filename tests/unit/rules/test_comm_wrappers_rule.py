"""Autograd wrappers of collectives (`_AlltoAllSingle`, `_AllGather*`, `_Reduce_Scatter*`, their backward nodes)
block until their collective completes: on a CPU (gloo) trace their span is communication wait, not compute
(issue #28.3). Each expected overlap is computed here from the events: by hand for the generated traces, and for
the `ep2` run by a small independent sweep over the trace JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.rank.classify import is_host_comm
from tests.gen.builder import GLOO_TID, MAIN_TID, TraceBuilder
from tests.gen.plain import union


def _cpu_trace(tmp_path, wrapper: str | None):
    """One 1000 µs step: aten::mm [100, 300]; the wrapper [300, 700] enqueueing c10d::alltoall_base_ [305, 315]
    and waiting for gloo:all_to_all [320, 690] on the gloo thread; aten::add [700, 900]. Without a wrapper the
    same time is an ordinary op (`MyExpertFn`), which computes while the all-to-all runs."""
    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    b.thread_name(MAIN_TID, "pt_main_thread")
    b.thread_name(GLOO_TID, "pt_gloo_runloop")
    b.step(1, 0, 1000)
    b.cpu_op("aten::mm", 100, 200)
    b.cpu_op(wrapper or "MyExpertFn", 300, 400)
    b.cpu_op("c10d::alltoall_base_", 305, 10)
    b.gloo("all_to_all", 320, 370)
    b.cpu_op("aten::add", 700, 200)
    b.write(tmp_path / "run" / "rank0.json")
    (r,) = analyze_path(str(tmp_path / "run"), rules=False, jobs=1).ranks
    return r


@pytest.mark.parametrize("wrapper", ["_AlltoAllSingle", "_AlltoAll", "_AllGather", "_AllGatherBase",
                                     "_Reduce_Scatter", "_AllReduce", "_AlltoAllSingleBackward",
                                     "autograd::engine::evaluate_function: _AlltoAllSingleBackward",
                                     "_AllToAll", "_AllGatherFromSequenceParallelRegion"])
def test_wrapper_blocking_is_communication_wait(tmp_path, wrapper):
    r = _cpu_trace(tmp_path, wrapper)
    assert r.overlap_ratio == 0.0  # the all-to-all [320, 690] runs only while the wrapper waits
    assert r.compute_ms == pytest.approx((200 + 200) / 1e3)  # mm and add; the wrapper's 400 µs is not compute
    assert r.comm_ms == pytest.approx(370 / 1e3)


def test_silent_twin_an_ordinary_op_computes_under_the_collective(tmp_path):
    r = _cpu_trace(tmp_path, None)
    # MyExpertFn [300, 700] minus the enqueue [305, 315]: the all-to-all [320, 690] lies inside it
    assert r.overlap_ratio == pytest.approx(1.0)
    assert r.compute_ms == pytest.approx((200 + 390 + 200) / 1e3)


@pytest.mark.parametrize("name", ["aten::all_gather_like", "_AllGatherish stuff", "MyAlltoAllSingle", "_Allocator",
                                  "_ReduceOp", "AllGatherKernel", "_AllToAllX Backward"])
def test_names_that_only_resemble_wrappers_are_not_communication(name):
    assert not is_host_comm(name)


# ---------------------------------------------------------------- ep2: llmdiag vs an independent sweep

COMM_OPS = ("c10d::", "_c10d_functional", "record_param_comms", "gloo:", "_AlltoAll", "_AllGather", "_AllReduce",
            "_Reduce_Scatter", "autograd::engine::evaluate_function: _AlltoAll")



def _inter(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _minus(a, b):
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append([cur, bs])
            cur = max(cur, be)
        if cur < e:
            out.append([cur, e])
    return out


def _len(iv):
    return sum(e - s for s, e in iv)


def independent_overlap(path: Path) -> float:
    """Σ over ProfilerSteps of |gloo collective spans ∩ compute| / |gloo collective spans|, where compute is the
    outermost cpu_ops of the training thread minus every communication op and wrapper (at any depth)."""
    with gzip.open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [[e["ts"], e["ts"] + e["dur"]] for e in ev if e["name"].startswith("ProfilerStep#")]
    comm = union([e["ts"], e["ts"] + e["dur"]] for e in ev if e["name"].startswith("gloo:")
                  and not e["name"].startswith(("gloo:send", "gloo:recv")))
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    top, end = [], {}
    for e in ops:  # outermost ops per thread
        if e["ts"] >= end.get(e["tid"], -1):
            top.append(e)
            end[e["tid"]] = e["ts"] + e["dur"]
    waits = union([e["ts"], e["ts"] + e["dur"]] for e in ops if e["name"].startswith(COMM_OPS))
    compute = _minus(union([e["ts"], e["ts"] + e["dur"]] for e in top), waits)
    c = _inter(comm, union(steps))
    return _len(_inter(c, compute)) / _len(c)


@pytest.mark.slow
def test_ep2_overlap_matches_an_independent_sweep(tmp_path, llmdiag_run):
    out = tmp_path / "ep2"
    llmdiag_run(out, "ep2", "--moe-experts", "4")
    a = analyze_path(str(out), rules=False, jobs=1)
    for r in a.ranks:
        want = independent_overlap(Path(r.file))
        assert r.overlap_ratio == pytest.approx(want, abs=0.02), (r.rank, r.overlap_ratio, want)
