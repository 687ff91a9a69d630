"""Issue #34's classes on planted traces (tests/expert/planted.py): each finding reads the dependency that made
the time, checked against the generator's facts (the placed events), and its silent twin stays silent."""

from __future__ import annotations

import re

import statistics

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.expert import planted


def _run(tmp_path, **knobs):
    k = planted.Knobs(**knobs)
    planted.write(k, str(tmp_path))
    return analyze_path(str(tmp_path), jobs=1), planted.simulate(k)[1]


def _one(a, rid):
    got = [f for f in a.findings if f.id == rid]
    return got[0] if got else None


def test_event_wait_names_the_wait_not_the_copy(tmp_path):
    a, facts = _run(tmp_path, event_wait_ms=40.0)
    f = _one(a, "event_wait")
    assert f is not None and f.severity == "high"
    inside = statistics.fmean(v[0] for per in facts["event_wait"].values() for v in per.values())
    assert f.gain_ms == pytest.approx(inside, abs=1e-3)  # 39.94 ms: the idle inside the copy call, per step
    text = f.evidence.text + f.action
    assert "stream 7" in text and "stream 30" in text and "cudaStreamWaitEvent" in text
    assert "indexSelectLargeIndex" in f.evidence.text  # what ran on the recording stream
    assert all("pin_memory" not in (x.action or "") for x in a.findings)


def test_event_wait_twin_is_a_copy(tmp_path):
    a, _ = _run(tmp_path, blocking_copy_ms=40.0, stream_wait=True)
    assert _one(a, "event_wait") is None
    assert "pin_memory" in _one(a, "host_sync").action


def test_iterations_without_profiler_step_from_optimizer_steps(tmp_path):
    """5 iterations, no ProfilerStep, one `Optimizer.step#SGD.step` each: 4 iterations between consecutive optimizer
    steps (the first optimizer step's iteration may have started before the capture), each the planted period
    (the generator's step length, 110.135 ms), not one window over the whole capture."""
    a, facts = _run(tmp_path, autograd=True, no_profiler_step=True)
    r = a.ranks[0]
    assert r.steps_source == "Optimizer.step" and len(r.steps) == 4
    period = statistics.fmean(v[0] for v in facts["steps"].values())
    assert all(abs(s.time_ms - period) < 0.1 for s in r.steps)
    assert any("Optimizer.step" in w for w in r.warnings)


def test_profiler_step_source(tmp_path):
    a, _ = _run(tmp_path, autograd=True)
    assert a.ranks[0].steps_source == "ProfilerStep" and len(a.ranks[0].steps) == 5


def test_first_call_of_a_shape_is_one_time(tmp_path):
    """Step 10's first aten::mm of 6 shapes holds the host 2.5 ms each (GPU drained); the same shapes' later calls
    take 25 us (the generator's host_us - 5): a one-time setup, no per-step gain; every named stretch is a
    first call with its later calls' median."""
    a, _ = _run(tmp_path, first_call_shapes=6, steps=2)
    f = _one(a, "host_op_stall")
    assert f is not None and f.severity == "low" and f.gain_ms is None and "one-time" in f.title
    st = [s for s in a.ranks[0].idle.stretches if s.cause == "host"]
    assert st and all(s.later_calls_ms == pytest.approx(0.025) and s.step == 10 for s in st)


def test_slow_calls_every_step_are_per_step(tmp_path):
    a, _ = _run(tmp_path, first_call_shapes=6, steps=2, slow_every_step=True)
    f = _one(a, "host_op_stall")
    assert f is not None and f.gain_ms and "one-time" not in f.title
    assert all(s.later_calls_ms is None for s in a.ranks[0].idle.stretches)


def test_straggler_thread_stall_inside_its_collective(tmp_path):
    """Rank 2's autograd thread (tid 202) sits 80 ms per step inside its backward all_to_all op before anything
    under it, while a side-stream kernel keeps its device busy: the straggler's cause is that thread and op, with
    the planted 80 ms (to the µs: the op's first child starts 80.002 ms after it), and its peers have none."""
    a, _ = _run(tmp_path, thread_stall_rank=2, thread_stall_ms=80.0)
    st = {r.rank: r.comm_host_stall for r in a.ranks}
    assert st[2].ms_per_step == pytest.approx(80.002, abs=1e-3) and st[2].op == "nccl:all_to_all"
    assert all(st[r].ms_per_step == 0 for r in (0, 1, 3))
    f = _one(a, "stragglers")
    assert f is not None and "tid 202" in f.evidence.text and "does not show why" not in f.evidence.text


def test_process_stall_is_not_a_thread_stall(tmp_path):
    a, _ = _run(tmp_path, stall_rank=2, stall_ms=30.0)
    assert all(r.comm_host_stall.ms_per_step == 0 for r in a.ranks)
    assert "no profiled host op" in _one(a, "stragglers").evidence.text


def test_launch_advice_only_where_launch_calls_are_the_cost(tmp_path):
    """800 4-us kernels behind 30-us host ops per step. With 8-us launch calls (6.4 ms of the 20.8 ms the device waits
    for launches fall inside them, by construction) and with 0.5-us calls (0.4 ms) the idle is the ops' host work:
    "host ops", no fusion of short kernels, no graphs. The launch statistics count every call."""
    a, _ = _run(tmp_path / "launch", tiny_kernels=800)
    f = _one(a, "host_bound")
    # each tiny kernel's 26-us gap holds 8 us of its launch call (the call [h, h + 8], the kernel at h + 10): 800 x 8
    # = 6.40 ms of 20.8 ms, under half: the finding is titled for the host ops (the fresh review of real traces
    # called "launches are the cost" at 10-20 % of the idle misleading), and says what the calls hold
    assert re.search(r"6\.4\d ms falls inside the launch calls", f.evidence.text)
    assert "the host's op work is the cost, not the launch calls" in f.evidence.text
    assert f.title.endswith("behind host ops between launches") and "fuse the short kernels" not in f.action
    assert "CUDA graph" not in f.action and "torch.compile(model)` removes per-op Python" in f.action
    ls = a.ranks[0].launch  # every planted launch call takes 8 us: 800 tiny + 54 model kernels + 5 collectives
    assert ls.launches_per_step == 859 and ls.launch_ms_per_step == pytest.approx(859 * 8e-3, abs=1e-6)
    assert ls.kernel_launch_ms_per_step == pytest.approx(859 * 8e-3, abs=1e-6)  # all of them launch kernels
    b, _ = _run(tmp_path / "ops", tiny_kernels=800, launch_us=0.5)
    g = _one(b, "host_bound")
    assert g.title.endswith("host ops between launches") and "fuse the short kernels" not in g.action
    assert "CUDA graph" not in g.action


def test_new_fields_survive_the_summary(tmp_path):
    """The dependencies the rules read (event waits, thread stalls, step source) round-trip through the JSON
    summary, so rules on a summary read back fire the same."""
    import json

    from llmdiag.diagnose.model.analysis import Analysis

    a, _ = _run(tmp_path, event_wait_ms=40.0, thread_stall_rank=2, thread_stall_ms=80.0)
    b = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert b.ranks[0].idle.stretches == a.ranks[0].idle.stretches and b.ranks[0].idle.stretches[0].event_wait
    assert b.ranks[2].comm_host_stall == a.ranks[2].comm_host_stall and b.ranks[0].steps_source == "ProfilerStep"
    assert [(f.id, f.gain_ms) for f in b.findings] == [(f.id, f.gain_ms) for f in a.findings]
