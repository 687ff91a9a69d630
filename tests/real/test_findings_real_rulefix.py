"""The fresh review's three misleading findings on real traces, each checked against numbers read from the
events with plain gzip/json (independent of llmdiag): a recurring stall is no one-time setup, a loader-bound job
gets no larger-batch advice, a latency-bound gloo all-reduce's exposed time is its gain."""

from __future__ import annotations

import glob
import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
pytestmark = pytest.mark.real


@cache
def _a(rel: str):
    return analyze_path(str(REAL / rel), jobs=1)


def _events(path: str) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _step_of(steps: list[dict], ts: float) -> str | None:
    return next((s["name"] for s in steps if s["ts"] <= ts < s["ts"] + s["dur"]), None)


def test_control_recurring_first_call_is_not_one_time():
    """Rank 3 of trace_diff/control: `MulBackward0` (autograd thread) holds the host 2.41 ms in ProfilerStep#1009
    and 2.14 ms in #1010 (its later calls ~0.04 ms): the "first call" stalls again in the next step, so it is no
    one-time setup; llmdiag must not call it one."""
    ev = _events(str(REAL / "hta/trace_diff/control.json.gz"))
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    mul = [e for e in ev if e["name"] == "autograd::engine::evaluate_function: MulBackward0"]
    slow = {_step_of(steps, e["ts"]) for e in mul if e["dur"] >= 1000}
    assert slow == {"ProfilerStep#1009", "ProfilerStep#1010"}
    assert sorted(e["dur"] for e in mul)[len(mul) // 2] < 100  # the typical call: tens of µs
    a = _a("hta/trace_diff/control.json.gz")
    assert not [f for f in a.findings if "one-time" in f.title + f.action]


def _loader_idle(path: str) -> list[tuple[float, float]]:
    """(device idle ms inside DataLoader `__next__`, step ms) per ProfilerStep, from the events."""
    ev = _events(path)
    dev = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat", "").lower() in
                 ("kernel", "memcpy", "memset", "gpu_memcpy", "gpu_memset"))
    busy: list[list[float]] = []
    for a, b in dev:  # the device's busy time as a union
        if busy and a <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], b)
        else:
            busy.append([a, b])
    out = []
    for s in (e for e in ev if e["name"].startswith("ProfilerStep#")):
        for d in (e for e in ev if "DataLoader" in e["name"] and "__next__" in e["name"]
                  and s["ts"] <= e["ts"] < s["ts"] + s["dur"]):
            x, y = d["ts"], d["ts"] + d["dur"]
            on = sum(max(0.0, min(b, y) - max(a, x)) for a, b in busy)
            out.append(((d["dur"] - on) / 1000, s["dur"] / 1000))
    return out


@pytest.mark.parametrize("workers,starved", [("0", True), ("4", False)])
def test_memory_unused_batch_advice_needs_a_busy_device(workers, starved):
    """resnet50, num_workers=0 (the newest capture, the one analysed): the device idles 31.9-46.1 ms of each
    149-159 ms step inside the single-process DataLoader's `__next__` (over 20 % each), so no larger-batch advice,
    the headroom and the loader named instead. num_workers=4: the loader idle is under 5 % of every step, the
    advice stays (its twin)."""
    rel = f"kineto/samples/resnet50_num_workers_{workers}"
    newest = sorted(glob.glob(str(REAL / rel / "*.pt.trace.json*")))[-1]
    per = _loader_idle(newest)
    assert per and (all(i >= 0.2 * s for i, s in per) if starved else all(i < 0.05 * s for i, s in per))
    (f,) = [f for f in _a(rel).findings if f.id == "memory_unused"]
    assert f.severity == "low" and f.gain_ms is None
    assert ("raise the microbatch" in f.action) != starved
    assert ("waiting for the DataLoader" in f.evidence.text) == starved


def test_gloo_latency_bound_gain_is_the_exposed_time():
    """cpu_only_rank-34: ProfilerStep#551 (210.11 ms) holds the first pair of gloo all-reduces; their union inside
    it is 178.78 ms (85.1 %): the gain, a bound, and high."""
    ev = _events(str(REAL / "hta/cpu_only_rank-34.pt.trace.json.gz"))
    (s,) = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    a, b = s["ts"], s["ts"] + s["dur"]
    spans = sorted((max(a, e["ts"]), min(b, e["ts"] + e["dur"])) for e in ev if e["name"] == "gloo:all_reduce"
                   and e["ts"] < b and e["ts"] + e["dur"] > a)
    union, end = 0.0, a
    for x, y in spans:
        union += max(0.0, y - max(x, end))
        end = max(end, y)
    (f,) = [f for f in _a("hta/cpu_only_rank-34.pt.trace.json.gz").findings if f.id == "comm_latency_bound"]
    assert f.gain_ms == pytest.approx(union / 1000, abs=0.01) and f.gain_kind == "bound"
    assert f.severity == "high" and union / s["dur"] > 0.8


def test_zero_grad_fills_left_out_of_host_bound_are_not_shared_with_it():
    """kineto resnet50_num_workers_4 (fresh review, stop 42): host_bound's gain leaves zero_grad's fills out
    ("their own finding, not counted"), so zero_grad's gain is none of host_bound's: it adds its whole ~6 ms (the
    judge: set_to_none is worth ~6 ms; the old text said it added 0.20 ms). The fills' idle from the events of
    the run analysed (the newer file): the device idle inside each `Optimizer.zero_grad#` span."""
    a = _a("kineto/samples/resnet50_num_workers_4")
    by = {f.id: f for f in a.findings}
    hb, zg = by["host_bound"], by["zero_grad"]
    assert "zero_grad's fills (their own finding), not counted" in hb.evidence.text
    assert zg.shared_ms == 0 and zg.part_of is None and "part of" not in zg.expected_gain
    ev = _events(sorted(glob.glob(str(REAL / "kineto/samples/resnet50_num_workers_4/*.json.gz")))[-1])
    busy: list[list[float]] = []
    for b, e in sorted((x["ts"], x["ts"] + x["dur"]) for x in ev if x.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")):
        if busy and b <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], e)
        else:
            busy.append([b, e])
    idle = sorted((z["dur"] - sum(max(0.0, min(e, z["ts"] + z["dur"]) - max(b, z["ts"])) for b, e in busy)) / 1e3
                  for z in ev if str(z["name"]).startswith("Optimizer.zero_grad#"))
    assert len(idle) >= 3 and zg.gain_ms == pytest.approx(idle[len(idle) // 2], abs=0.5)


def test_sampled_pair_unpaired_collectives_are_not_a_late_start():
    """hta/sampled_pair (fresh review, stop 42): "rank 1's capture starts 1 collective / 0.55 ms after the others'"
    was misleading: the capture is event-sampled, and collectives without a partner run through both steps (the
    judge: 5 of each rank's 10 SendRecv kernels paired), not only at the start. Read here: the host ops' External
    ids have holes on both ranks (under 80 % of them followed by the next id). The line says the sampling dropped
    the partners."""
    for p in sorted(glob.glob(str(REAL / "hta/sampled_pair/*.json.gz"))):
        ids = {e["args"]["External id"] for e in _events(p)
               if e.get("cat") == "cpu_op" and isinstance((e.get("args") or {}).get("External id"), int)}
        assert ids and sum(1 for x in ids if x + 1 in ids) / len(ids) < 0.8
    msgs = [i.message for i in _a("hta/sampled_pair").issues]
    assert not any("after the others'" in m for m in msgs)
    assert any("capture is event-sampled" in m and "the sampling dropped the partner" in m for m in msgs)


def test_forward_only_capture_is_said():
    """torchrec sst_sleep_pl_dense_after_backward_2 (fresh review, stop 42: "never says the capture is forward-
    only"): every file runs `DistributedDataParallel.forward` but no `*Backward*` op and no `Optimizer.step#`,
    read here; llmdiag says the capture is forward-only. nccl_data (a DDP job with its backward) does not get it."""
    files = sorted(glob.glob(str(REAL / "torchrec/sst_sleep_pl_dense_after_backward_2/*.json.gz")))
    assert len(files) == 4
    for p in files:
        names = {str(e.get("name", "")) for e in _events(p)}
        assert "DistributedDataParallel.forward" in names
        assert not any("Backward" in n or n.startswith("Optimizer.step#") for n in names)
    assert [f.severity for f in _a("torchrec/sst_sleep_pl_dense_after_backward_2").findings
            if f.id == "forward_only"] == ["low"]
    assert not [f for f in _a("hta/nccl_data.json.gz").findings if f.id == "forward_only"]
