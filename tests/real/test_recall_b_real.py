"""Issue #34 recall B's metrics on the real traces, against numbers computed here from the events with plain
gzip/json: DDP's copy-back ops (`ranks[].ddp_copies`), the idle inside CUDA-graph replays (`ranks[].graph_replays`),
and the host's waits for queued kernels in a copy that held it (`hints.host_wait_ms`)."""

from __future__ import annotations

import bisect
import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.plain import covered, union

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
pytestmark = pytest.mark.real
DEV = ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
RT = ("cuda_runtime", "Runtime")


@cache
def _events(path: Path) -> list:
    with gzip.open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]





def _steps(ev):
    return sorted((e for e in ev if e["name"].startswith("ProfilerStep#") and e.get("cat") not in
                   ("gpu_user_annotation",)), key=lambda e: e["ts"])


@pytest.mark.parametrize("rel", ["hta/nccl_data.json.gz", "tracelens/mi300_ddp8_actckpt_rank0.json.gz"])
def test_ddp_copy_back(rel):
    ev = _events(REAL / rel)
    steps = _steps(ev)
    dev = [e for e in ev if e.get("cat") in DEV]
    u = union([(e["ts"], e["ts"] + e["dur"]) for e in dev])
    by_corr = {e["args"].get("correlation"): e for e in dev}
    rts = sorted((e for e in ev if e.get("cat") in RT), key=lambda e: e["ts"])
    rts_ts = [e["ts"] for e in rts]
    ops = [e for e in ev if e["name"] == "torch.distributed.ddp.reducer::copy_bucket_to_grad"
           and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)]
    idle = sum(o["dur"] - covered(u, o["ts"], o["ts"] + o["dur"]) for o in ops) / 1000 / len(steps)
    copies = 0.0
    for o in ops:
        i = bisect.bisect_left(rts_ts, o["ts"])
        while i < len(rts) and rts[i]["ts"] <= o["ts"] + o["dur"]:
            k = by_corr.get(rts[i]["args"].get("correlation")) if rts[i]["tid"] == o["tid"] else None
            copies += k["dur"] if k else 0.0
            i += 1
    copies /= 1000 * len(steps)
    d = analyze_path(str(REAL / rel), jobs=1).ranks[0].ddp_copies
    assert d is not None and d.back_ops == pytest.approx(len(ops) / len(steps))
    assert d.back_idle_ms == pytest.approx(idle, abs=0.01) and d.back_device_ms == pytest.approx(copies, abs=0.005)
    assert d.ddp_forward


def test_graph_replay_idle_a100():
    """Replays ready at max(launch call start, the previous op's end on the first node's stream); idle stretches of
    ≥ 1 ms with no device op inside their union, over the host ProfilerSteps (llmdiag's windows are the device's:
    within 0.5 ms per step here)."""
    rel = "hta/a100_16rank_alltoall_rank0.json.gz"
    ev = _events(REAL / rel)
    steps = _steps(ev)
    dev = [e for e in ev if e.get("cat") in DEV]
    u = union([(e["ts"], e["ts"] + e["dur"]) for e in dev])
    nodes: dict = {}
    for e in dev:
        nodes.setdefault(e["args"].get("correlation"), []).append(e)
    stream: dict = {}
    for e in sorted(dev, key=lambda e: e["ts"]):
        stream.setdefault(e["args"].get("stream"), []).append(e)
    spans = []
    for g in (e for e in ev if e["name"] == "cudaGraphLaunch"):
        ks = sorted(nodes.get(g["args"]["correlation"], []), key=lambda e: e["ts"])
        if not ks:
            continue
        s = stream[ks[0]["args"].get("stream")]
        i = s.index(ks[0])
        pred = s[i - 1]["ts"] + s[i - 1]["dur"] if i else float("-inf")
        spans.append((min(max(g["ts"], pred), ks[0]["ts"]), max(k["ts"] + k["dur"] for k in ks)))
    idle = []
    for a, b in union(spans):
        cur = a
        for x, y in u:
            if y <= cur or x >= b:
                continue
            if x > cur:
                idle.append((cur, x))
            cur = max(cur, y)
        if cur < b:
            idle.append((cur, b))
    idle = [(a, b) for a, b in idle if b - a >= 1000]
    per_step = [sum(max(0.0, min(s["ts"] + s["dur"], b) - max(s["ts"], a)) for a, b in idle) for s in steps]
    g = analyze_path(str(REAL / rel), jobs=1).ranks[0].graph_replays
    assert g is not None
    assert g.idle_ms == pytest.approx(sum(per_step) / 1000 / len(steps), abs=0.5)  # 106.26 vs 105.90
    longest = max(min(s["ts"] + s["dur"], b) - max(s["ts"], a) for s in steps for a, b in idle)
    assert g.longest_ms == pytest.approx(longest / 1000, abs=1e-3)  # 64.33, in step 552
    assert g.held_region == "## sparse_data_dist ##" and g.longest_op == "CompiledFunctionBackward"


def test_host_waits_for_queued_kernels_in_a_pageable_copy():
    """resnet50_num_workers_4, run 2: the device-busy time inside each `cudaMemcpyAsync` before its own copy began
    (the copy starting inside the call: the call held the host), plus the `*Synchronize` calls, per step."""
    folder = REAL / "kineto/samples/resnet50_num_workers_4"
    path = max(folder.glob("*.pt.trace.json.gz"))  # run 2, the one analysed
    ev = _events(path)
    steps = _steps(ev)
    dev = [e for e in ev if e.get("cat") in DEV]
    u = union([(e["ts"], e["ts"] + e["dur"]) for e in dev])
    by_corr = {e["args"].get("correlation"): e for e in dev}
    wait = 0.0
    for c in (e for e in ev if e.get("cat") in RT and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)):
        if c["name"].endswith("Synchronize"):
            wait += c["dur"]
        elif c["name"] == "cudaMemcpyAsync" and (k := by_corr.get(c["args"].get("correlation"))) \
                and c["ts"] < k["ts"] < c["ts"] + c["dur"]:
            wait += covered(u, c["ts"], k["ts"])
    r = analyze_path(str(folder), jobs=1).ranks[0]
    assert r.hints.host_wait_ms == pytest.approx(wait / 1000 / len(steps), abs=0.01)  # 4.00 ms (0.07 before)
