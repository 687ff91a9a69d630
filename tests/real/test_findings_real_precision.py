"""fp32_gemm on the real V100 traces: the share of compute in fp32 GEMMs, computed here from the events
(`*sgemm*` kernels over all kernels but NCCL's and copies), and the fp16 + GradScaler advice where it is real."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
pytestmark = pytest.mark.real
TORCHREC = ["torchrec/sst_long_a2a_optimizer_3", "torchrec/sst_long_a2a_optimizer_5",
            "torchrec/sst_long_a2a_optimizer_5_qcomm/*_5410", "torchrec/sst_long_a2a_optimizer_5_qcomm/*_5598",
            "torchrec/sst_sleep_pl_dense_after_backward_2"]


@cache
def _a(rel: str):
    """A folder, or the files of one run in a folder holding two (`folder/*_<pid prefix>`)."""
    if "*" in rel:
        return analyze_path(sorted(str(p) for p in REAL.glob(rel + "*")), jobs=1)
    return analyze_path(str(REAL / rel), jobs=1)


def _sgemm_share(path: Path, convs: bool = False) -> float:
    """fp32 GEMM kernel time over compute kernel time, straight from the JSON (whole trace, not per step); with
    `convs`, the fp32 cuDNN convolutions too (`*_scudnn_*`, `dgrad_engine<float`, `wgrad_alg*_engine<float`: the
    sgemm-named ones are counted already), which the fp32 rule counts with the GEMMs."""
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    k = [e for e in ev if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()]
    conv = re.compile(r"_scudnn_|dgrad_engine<float|wgrad_alg\d_engine<float") if convs else None
    return sum(e["dur"] for e in k if "sgemm" in e["name"] or (conv and conv.search(e["name"]))) \
        / sum(e["dur"] for e in k)


@pytest.mark.parametrize("rel", TORCHREC)
def test_torchrec_v100_fp32_gemms_get_fp16_advice(rel):
    a = _a(rel)
    f = next(f for f in a.findings if f.id == "fp32_gemm")
    # GradScaler scales a loss for backward: sst_sleep_pl_dense_after_backward_2's capture holds no backward op
    # (0 events named *Backward* or autograd::engine* in any of its 4 files, no Optimizer.step; only
    # Optimizer.zero_grad), so it is not advised there (issue #34: no GradScaler without a backward op)
    backward = any(r.training.backward_ops > 0 for r in a.ranks)
    assert "torch.float16" in f.action and ("GradScaler" in f.action) == backward and "bfloat16" not in f.action
    assert backward == ("after_backward" not in rel)
    # simulated where every rank it names has a graph the trace explains (qcomm run 2 since the graph drops
    # syncs on ops launched after them), else the estimate
    assert f.gain_kind in ("estimate", "simulated") and 0 < f.gain_ms < a.step_ms
    for r in a.ranks:
        want = _sgemm_share(Path(r.file))
        assert want > 0.4  # the DLRM's dense MLP: 49-61 % of the compute kernel time
        assert r.hints.compute_capability == 7.0
        assert r.hints.fp32_gemm_frac == pytest.approx(want, abs=0.05)  # profiled steps vs the whole file


def test_v100_resnet_fp32_gets_fp16_advice():
    rel = "hta/ns_resolution_rank-0.pt.trace.json.gz"
    (r,) = _a(rel).ranks
    assert r.hints.fp32_gemm_frac == pytest.approx(_sgemm_share(REAL / rel, convs=True), abs=0.05)
    # and the BN chains' fusion (truth B3 problem 2, tests/expert/expectations_fusion.py): nothing else
    assert [f.id for f in _a(rel).findings if f.severity in ("high", "medium")] == ["fp32_gemm", "norm_fusion"]
    # graded by the half left after the fp32 finding's autocast: ~10 % of the step now, medium (the truth: 5-10 ms)
    nf = next(f for f in _a(rel).findings if f.id == "norm_fusion")
    assert nf.gain_ms / _a(rel).ranks[0].step_time_ms >= 0.10 and nf.severity == "medium"


def test_bf16_mi300_and_b200_are_silent():
    for rel in ("tracelens/mi300_ddp8_actckpt_rank0.json.gz", "tracelens/b200_vllm_tp8_rank0.json.gz"):
        assert "fp32_gemm" not in [f.id for f in _a(rel).findings]
