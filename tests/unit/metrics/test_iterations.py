"""Iterations of captures without ProfilerStep or optimizer steps (issue #34 item 4; metrics/rank/iterations.py).

Generated captures (tests/gen/iterations.py) place every op by hand, so each iteration's host span is written
here from the generator's constants: iteration i of a loop of period P begins at i·P. The silent twins (one pass
of distinct ops, one long op, a one-shot forward of identical layers, a burst of tiny repeats before a long op)
must stay one window, and a capture with ProfilerStep keeps its steps.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.iterations import detect
from llmdiag.diagnose.metrics.rank.steps import host_steps, step_source, windows
from tests.gen import iterations as g

US = 1000  # ns per µs
REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
MI300 = REAL / "tracelens" / "mi300_resnet18_no_caching_allocator.json.gz"


def _trace(tmp_path, b):
    t = load_trace(b.write(tmp_path / "rank0.json"))
    classify(t)
    return t


def _host(t):
    return [(w.step, w.host_start, w.host_end) for w in windows(t)[0]]


def test_training_loop_k_iterations(tmp_path):
    """5 iterations every P µs from 0, no ProfilerStep, no optimizer annotation: 5 steps [i·P, (i+1)·P), the last
    ending with its last op (aten::item at 4·P + 850 µs)."""
    t = _trace(tmp_path, g.training(5))
    want = [(i, i * g.P * US, (i + 1) * g.P * US) for i in range(4)] + [(4, 4 * g.P * US, (4 * g.P + g.LAST_END) * US)]
    assert step_source(t) == "repeated_pattern" and _host(t) == want


@pytest.mark.parametrize("varying", [False, True])
def test_cpu_only_backward_on_the_main_thread(tmp_path, varying):
    """A CPU-only run (its backward on the main thread, no kernels), 4 iterations: the same spans as on a GPU, read
    from the repeats or, where the iterations differ, from the forward/backward alternation."""
    t = _trace(tmp_path, g.training(4, varying=varying, cpu=True))
    if varying:
        upd = g.UPDATE[0][1]
        cut = [0] + [(i - 1) * g.P + upd for i in range(1, 4)] + [3 * g.P + g.BACKWARD_END]
        want, source = [(i, a * US, b * US) for i, (a, b) in enumerate(zip(cut, cut[1:]))], "forward_backward"
    else:
        want = [(i, i * g.P * US, (i + 1) * g.P * US) for i in range(3)] + [(3, 3 * g.P * US, (3 * g.P + g.LAST_END) * US)]
        source = "repeated_pattern"
    assert step_source(t) == source and _host(t) == want


def test_training_loop_per_iteration_numbers(tmp_path):
    """The analysis reads 5 steps from the repeats, its warning says where they came from, and each step's device
    window holds one iteration's kernels: 6, one per GPU op (conv, linear, 4 backward nodes)."""
    g.training(5).write(tmp_path / "t" / "rank0.json")
    r = analyze_path(str(tmp_path / "t"), jobs=1).ranks[0]
    gpu_ops = sum(any(x in n for x in g.GPU_OPS) for n, _, _ in g.FORWARD + g.BACKWARD + g.UPDATE)
    assert r.steps_source == "repeated_pattern" and len(r.steps) == 5
    assert any("5 iterations found where the main thread's top-level ops repeat" in w for w in r.warnings)
    assert gpu_ops == 6
    t = _trace(tmp_path, g.training(5))
    for w in windows(t)[0]:  # every window holds its own iteration's 6 kernels
        kern = (t.stream >= 0) & (t.ts >= w.start) & (t.ts + t.dur <= w.end)
        assert int(kern.sum()) == gpu_ops


def test_warmup_iteration_is_iteration_zero(tmp_path):
    """The first iteration also runs cuDNN's algorithm search (WARMUP_EXTRA µs more, one more op): it is iteration
    0, [0, P + 500); the 4 others follow every P."""
    t = _trace(tmp_path, g.training(5, warmup=True))
    w0 = g.P + g.WARMUP_EXTRA
    want = [(0, 0, w0 * US)] + [(i, (w0 + (i - 1) * g.P) * US, (w0 + i * g.P) * US) for i in range(1, 4)]
    want.append((4, (w0 + 3 * g.P) * US, (w0 + 3 * g.P + g.LAST_END) * US))
    assert step_source(t) == "repeated_pattern" and _host(t) == want


def test_forward_only_inference_loop(tmp_path):
    """A forward-only loop (no backward, no optimizer): 4 iterations every INFER_P µs."""
    t = _trace(tmp_path, g.inference(4))
    p = g.INFER_P
    want = [(i, i * p * US, (i + 1) * p * US) for i in range(3)] + [(3, 3 * p * US, (3 * p + g.INFER_END) * US)]
    assert step_source(t) == "repeated_pattern" and _host(t) == want


def test_forward_backward_when_iterations_differ(tmp_path):
    """Each iteration runs a different number of data-dependent ops, so no op sequence repeats; its backward on
    the autograd thread closes it. Iterations run from one forward run's start to the next's: the first from 0,
    the next ones from the update ops after each backward (i·P - 240 µs), the last to its backward's end."""
    t = _trace(tmp_path, g.training(5, varying=True))
    upd = g.UPDATE[0][1]
    starts = [0] + [(i - 1) * g.P + upd for i in range(1, 5)]
    ends = starts[1:] + [4 * g.P + g.BACKWARD_END]
    assert step_source(t) == "forward_backward"
    assert _host(t) == [(i, a * US, b * US) for i, (a, b) in enumerate(zip(starts, ends))]


@pytest.mark.parametrize("make", [g.distinct_ops, g.single_op, g.one_shot_forward,
                                  lambda: g.one_shot_forward(norm_first=True), g.burst_then_long],
                         ids=["distinct", "single_op", "one_shot_layers", "one_shot_layers_norm_first",
                              "burst_then_long"])
def test_no_repetition_stays_one_window(tmp_path, make):
    """No iteration to find: one pass of distinct ops, one long op, one forward of 6 identical layers (they repeat,
    but the call begins with its embedding, which no layer runs; or with a norm each layer runs, before a slice
    and a copy: no warm-up iteration, which would run all of a layer's ops), 5 tiny repeats before a 20 ms op
    (the repeats hold 0.5 % of the time)."""
    t = _trace(tmp_path, make())
    assert detect(t) == ("", []) and step_source(t) == "capture" and len(windows(t)[0]) == 1


def test_profiler_steps_are_kept(tmp_path):
    """The same loop inside ProfilerStep#1..4: the ProfilerStep spans, numbered as the trace numbers them."""
    t = _trace(tmp_path, g.with_profiler_steps(4))
    assert step_source(t) == "ProfilerStep"
    assert host_steps(t) == [(i + 1, i * g.P * US, (i + 1) * g.P * US) for i in range(4)]
    assert [(w.step, w.host_start, w.host_end) for w in windows(t)[0]] == host_steps(t)


@pytest.mark.real(MI300)
def test_mi300_resnet18_iterations():
    """ResNet18 training on MI300X, no ProfilerStep: the trace holds one `Optimizer.zero_grad#SGD.zero_grad`
    (the loop's first op) and one `Optimizer.step#SGD.step` host annotation per iteration, counted here from the
    JSON; the analysis read one window over the 5 (per-capture numbers). Each iteration found begins at a
    zero_grad and holds exactly one optimizer step."""
    with gzip.open(MI300) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    zero = sorted(e["ts"] for e in ev if e["name"].startswith("Optimizer.zero_grad#"))
    step = sorted(e["ts"] for e in ev if e["name"].startswith("Optimizer.step#"))
    assert len(zero) == len(step) == 5
    t = load_trace(str(MI300))
    classify(t)
    wins = windows(t)[0]
    assert step_source(t) == "repeated_pattern" and len(wins) == len(step)
    rel = [round((z - t.origin_us) * US) for z in zero]
    assert [w.host_start for w in wins] == pytest.approx(rel, abs=US)  # to the µs: begins at its zero_grad
    for w in wins:
        assert sum(w.host_start <= (s - t.origin_us) * US < w.host_end for s in step) == 1
