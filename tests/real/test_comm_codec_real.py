"""The quantized-comm codec record on the real qcomm set (torchrec optimizer_5_qcomm, run 2), against the events read
here with plain gzip/json: per ProfilerStep, the kernels launched inside `## encoder/decoder` ranges, those launched
by the `ToCopyBackward0`/`ClampBackward1` autograd nodes right beside `_AlltoAllSingleBackward` (the codec's
gradients), and the SendRecv kernels of `_AlltoAllSingle` and `_AlltoAllSingleBackward` (the exchange it encodes)."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
QCOMM = REAL / "torchrec" / "sst_long_a2a_optimizer_5_qcomm"
pytestmark = pytest.mark.real
NODE = "autograd::engine::evaluate_function: "


@cache
def _a():
    return analyze_path(str(QCOMM), jobs=1)  # the newest run: run 2


def _read(path: Path) -> dict:
    """ms per step: encode, decode, backward (codec gradient nodes), wire (the a2a kernels), and the a2a kernels
    per step as (forward, backward) lists."""
    with gzip.open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    kern = [(k, launch[k["args"]["correlation"]]) for k in ev if k.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and k["args"].get("correlation") in launch]
    kern = [(k, c) for k, c in kern if any(s["ts"] <= c["ts"] < s["ts"] + s["dur"] for s in steps)]

    def under(span) -> list:
        return [k for k, c in kern if c["tid"] == span["tid"] and span["ts"] <= c["ts"] <= span["ts"] + span["dur"]]

    out = {"encoder": 0.0, "decoder": 0.0, "backward": 0.0, "wire": 0.0, "fwd": [], "bwd": []}
    for r in (e for e in ev if e["name"].startswith("## encoder") or e["name"].startswith("## decoder")):
        if any(s["ts"] <= r["ts"] < s["ts"] + s["dur"] for s in steps):
            out[r["name"][3:10]] += sum(k["dur"] for k in under(r)) / 1000
    nodes = sorted((e for e in ev if e["name"].startswith(NODE)), key=lambda e: e["ts"])
    for i, n in enumerate(nodes):
        if n["name"] == NODE + "_AlltoAllSingleBackward":
            j = i - 1
            while nodes[j]["name"] in (NODE + "ToCopyBackward0", NODE + "ClampBackward1"):
                out["backward"] += sum(k["dur"] for k in under(nodes[j])) / 1000
                j -= 1
            j = i + 1
            while nodes[j]["name"] in (NODE + "ToCopyBackward0", NODE + "ClampBackward1"):
                out["backward"] += sum(k["dur"] for k in under(nodes[j])) / 1000
                j += 1
            out["bwd"] += [k["dur"] / 1000 for k in under(n) if k["name"].startswith("ncclDevKernel")]
    for op in sorted((e for e in ev if e["name"] == "_AlltoAllSingle" and e.get("cat") == "cpu_op"), key=lambda e: e["ts"]):
        if not any(b["name"] == NODE + "_AlltoAllSingleBackward" and b["ts"] <= op["ts"] <= b["ts"] + b["dur"]
                   for b in nodes):  # the forward's, not the one nested in the backward
            out["fwd"] += [k["dur"] / 1000 for k in sorted(under(op), key=lambda k: k["ts"])
                           if k["name"].startswith("ncclDevKernel")]
    n = len(steps)
    out["wire"] = (sum(out["fwd"]) + sum(out["bwd"])) / n
    for k in ("encoder", "decoder", "backward"):
        out[k] /= n
    return out


def test_codec_cost_both_directions_and_the_exchange_it_encodes():
    a = _a()
    assert len(a.ranks) == 4
    for r in a.ranks:
        want = _read(Path(r.file).resolve())
        cc = r.comm_codec
        assert cc.encode_ms_per_step == pytest.approx(want["encoder"], abs=1e-3)
        assert cc.decode_ms_per_step == pytest.approx(want["decoder"], abs=1e-3)
        assert cc.backward_ms_per_step == pytest.approx(want["backward"], abs=1e-3) and want["backward"] > 5
        assert cc.wire_ms_per_step == pytest.approx(want["wire"], abs=1e-3)
        assert cc.wire_count_per_step == (len(want["fwd"]) + len(want["bwd"])) / 3
        fwd, bwd = want["fwd"], want["bwd"]  # one exchange per step, in step order: forward i pairs with backward i
        assert len(fwd) == len(bwd) == 3
        bound = sum(2 * min(x, y) for x, y in zip(fwd, bwd)) / 3
        assert cc.wire_bytes_bound_ms_per_step == pytest.approx(bound, abs=1e-3)


def test_codec_net_verdict_is_the_cost_less_the_most_it_saves():
    """The finding's gain is the mean codec cost less the least-waiting rank's byte-bound time × (32/16 − 1)."""
    a = _a()
    f = next(f for f in a.findings if f.id == "comm_codec")
    reads = [_read(Path(r.file).resolve()) for r in a.ranks]
    cost = sum(x["encoder"] + x["decoder"] + x["backward"] for x in reads) / len(reads)
    saved = min(r.comm_codec.wire_bytes_bound_ms_per_step for r in a.ranks)
    assert f.gain_kind == "estimate" and f.gain_ms == pytest.approx(cost - saved, abs=1e-3)
    assert 0 < f.gain_ms < cost
