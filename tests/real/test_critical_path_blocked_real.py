"""The per-rank critical path on real traces where the device is busy and the host blocked, against what the
events say read with plain gzip/json: the host can bound a step only while the device had nothing to compute, so
on a step whose device is >= 90 % busy the path's cpu_bound share stays within the share of the step in which no
compute kernel, copy or set ran (2 points for rounding). Before critical_path/blocking.py, resume.py's clock lag,
path.py's sink and graph.py's WAIT_MIN_READY_NS it did not: torchrec sst_long_a2a_optimizer_5 ranks 0 and 3 read
100 % cpu on step 5 (device 97-99 % busy, compute idle 26-28 %), optimizer_3 rank 1 84 % on step 6 (compute idle
28 %), trace_diff test.json 58 % on step 1012 (compute idle 10 %).

Ranks waiting in a collective on a straggler (torchrec sst_sleep_pl_dense_after_backward_2) are bound by the
collective. And a step without device work (a ProfilerStep the capture stopped in) leaves the rank's per-step mean.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
TR = "torchrec/"
OPT3_R1 = TR + "sst_long_a2a_optimizer_3/ip-172-31-16-248.us-east-2.compute.internal_29221.1698955894937697163.pt.trace.json.gz"
OPT5_R0 = TR + "sst_long_a2a_optimizer_5/ip-172-31-16-248.us-east-2.compute.internal_45920.1698957822175570404.pt.trace.json.gz"
OPT5_R3 = TR + "sst_long_a2a_optimizer_5/ip-172-31-16-248.us-east-2.compute.internal_45923.1698957822225232046.pt.trace.json.gz"
TRD = "hta/trace_diff/test.json.gz"
MI250 = "hta/amd_mi250_minitoy.json.gz"
SLEEP = TR + "sst_sleep_pl_dense_after_backward_2"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(rel: str) -> list[dict]:
    with gzip.open(REAL / rel) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]


def _covered(spans: list[tuple[float, float]], a: float, b: float) -> float:
    """µs of [a, b] covered by the union of `spans`."""
    tot, cur_a, cur_b = 0.0, None, None
    for s, e in sorted((max(a, s), min(b, e)) for s, e in spans if s < b and e > a):
        if cur_b is None or s > cur_b:
            tot += (cur_b - cur_a) if cur_b is not None else 0.0
            cur_a, cur_b = s, e
        else:
            cur_b = max(cur_b, e)
    return tot + ((cur_b - cur_a) if cur_b is not None else 0.0)


def _metrics(rel: str):
    out = run_job(RankJob(str(REAL / rel)))
    assert out.error is None, out.error
    return out.metrics


@pytest.mark.real(OPT3_R1, OPT5_R0, OPT5_R3, TRD)
@pytest.mark.parametrize("rel", [OPT3_R1, OPT5_R0, OPT5_R3, TRD])
def test_busy_device_steps_are_not_read_as_host_bound(rel):
    ev = _events(rel)
    dev = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in DEVICE_CATS]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in DEVICE_CATS
               and not e["name"].startswith("nccl")]
    m = _metrics(rel)
    checked = 0
    for s in m.steps:
        a = m.origin_us + s.start_ms * 1e3
        b = a + s.time_ms * 1e3
        busy = 100 * _covered(dev, a, b) / (b - a)
        if busy < 90:
            continue
        compute_idle = 100 - 100 * _covered(compute, a, b) / (b - a)
        assert s.critical_path.cpu_bound <= compute_idle + 2, (s.step, busy, compute_idle, s.critical_path)
        checked += 1
    assert checked >= 2  # the busy steps of these captures: 2 of 3 (torchrec), 6 of 6 (trace_diff)


@pytest.mark.real(SLEEP)
def test_ranks_waiting_in_a_collective_on_a_straggler_are_bound_by_it():
    """One rank of this job sleeps on its host (nothing on its device for most of each step); the others sit in
    one all-to-all kernel for most of the step, waiting for it, while their host is silent inside an op. Where one
    NCCL kernel covers half a step's window or more (read from the events), the path's communication share is at
    least that coverage (2 points for rounding): the rank was bound by the collective, not its blocked host
    (step 5 of ranks 0, 1 and 3 read 97 % cpu, 1 % communication, before resume.py read a silent op's wait)."""
    checked = 0
    for f in sorted((REAL / SLEEP).iterdir()):
        rel = f"{SLEEP}/{f.name}"
        nccl = [(e["ts"], e["ts"] + e["dur"]) for e in _events(rel) if e.get("cat") == "kernel"
                and e["name"].startswith("nccl")]
        m = _metrics(rel)
        for s in m.steps:
            a = m.origin_us + s.start_ms * 1e3
            b = a + s.time_ms * 1e3
            cover = max((100 * (min(b, y) - max(a, x)) / (b - a) for x, y in nccl if x < b and y > a), default=0)
            if cover >= 50:
                assert s.critical_path.gpu_communication_bound >= cover - 2, (rel, s.step, cover, s.critical_path)
                checked += 1
    assert checked >= 9  # 3 waiting ranks x 3 steps; the sleeping rank has no such kernel


@pytest.mark.real(MI250)
def test_partial_step_is_left_out_of_the_rank_mean():
    """ProfilerStep#2 lasts 0.049 ms and no event starts in it (the capture stopped): no step at all
    (steps.py `_stop_stub`); ProfilerStep#1's device work, read from the events (kernels and copies whose launch
    falls in its span), spans the window the rank's per-step length must be: not the mean of it and the stub."""
    ev = _events(MI250)
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    s1, s2 = ((e["ts"], e["ts"] + e["dur"]) for e in steps)
    dev = [e for e in ev if e.get("cat") in DEVICE_CATS]
    assert not [e for e in dev if s2[0] <= launch.get(e["args"].get("correlation"), -1) <= s2[1]]
    assert not [e for e in ev if s2[0] <= e["ts"] <= s2[1] and not e["name"].startswith("ProfilerStep#")
                and e.get("cat") not in DEVICE_CATS + ("gpu_user_annotation",)]  # no host event starts in it
    mine = [e for e in dev if s1[0] <= launch.get(e["args"].get("correlation"), -1) <= s1[1]]
    window_ms = (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) / 1e3
    m = _metrics(MI250)
    assert [st.step for st in m.steps] == [1] and m.critical_path.steps_left_out == 0
    assert m.critical_path.length_ms == pytest.approx(window_ms, abs=0.002)
    assert m.step_time_ms == pytest.approx(window_ms, abs=0.002)
