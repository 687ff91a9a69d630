"""The iteration detector (metrics/rank/iterations.py) on real captures whose iterations are known from the trace
itself: captures with ProfilerStep, whose spans the detector never reads (it leaves `ProfilerStep#` out of the
ops it reads), so they are the answer it must find again, read here from the JSON; and captures with nothing to
split (a gloo run loop's all-reduces; one vLLM generation step of 36 identical layers)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.iterations import detect
from llmdiag.diagnose.metrics.rank.steps import step_source

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
WITH_STEPS = ["hta/nccl_data.json.gz", "kineto/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
              "tracelens/mi300_ddp8_actckpt_rank0.json.gz"]


def _load(rel: str):
    t = load_trace(str(REAL / rel))
    classify(t)
    return t


def _profiler_steps(rel: str) -> list[tuple[float, float]]:
    """(start, end) µs of the host ProfilerStep#N spans, from the JSON."""
    with gzip.open(REAL / rel) as f:
        ev = json.load(f)["traceEvents"]
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X"
                  and str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")


@pytest.mark.real(*(REAL / r for r in WITH_STEPS))
@pytest.mark.parametrize("rel", WITH_STEPS)
def test_hidden_profiler_steps_are_found_again(rel):
    """As many iterations as ProfilerSteps, each beginning where its step begins (the first at its first op, within
    1 ms: up to 0.9 ms after, or 0.09 ms before where an op began just before the profiler's step; the others
    within 0.2 ms)."""
    steps = _profiler_steps(rel)
    t = _load(rel)
    source, spans = detect(t)
    assert source == "repeated_pattern" and len(spans) == len(steps) >= 3
    starts = [(s - t.origin_us) * 1000 for s, _ in steps]
    assert abs(spans[0][1] - starts[0]) <= 1e6
    assert [a for _, a, _ in spans[1:]] == pytest.approx(starts[1:], abs=0.2e6)


@pytest.mark.real(REAL / "hta/cpu_only_rank-34.pt.trace.json.gz")
def test_gloo_run_loop_is_not_a_loop():
    """A CPU rank whose capture holds 5 `gloo:all_reduce` spans on each of two run-loop threads and 4 zero-length
    ops on its main thread: nothing repeats that is an iteration."""
    assert detect(_load("hta/cpu_only_rank-34.pt.trace.json.gz")) == ("", [])


@pytest.mark.real(REAL / "tracelens/b200_vllm_tp8_rank0.json.gz")
def test_one_generation_step_stays_one_window():
    """vLLM eager inference: one `execute_context` annotation around one forward of 36 identical decoder layers.
    The layers repeat; they are not iterations."""
    t = _load("tracelens/b200_vllm_tp8_rank0.json.gz")
    assert detect(t) == ("", []) and step_source(t) == "capture"
