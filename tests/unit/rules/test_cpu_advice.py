"""CPU runs get advice for the CPU (issue 36 item 4): the same summary read as GPU traces and as CPU-only (gloo)
traces; on CPU no action names a GPU-only tool (DeepEP, DualPipe, Megatron's MoE overlap flag, NVLink), none
claims the host does not wait in a gloo collective, and the CPU-only caveat is the first finding."""

from __future__ import annotations

import re

from llmdiag.diagnose.rules import findings
from tests.gen.summaries import summary, typed

GPU_ONLY = re.compile(r"DeepEP|DualPipe|overlap-moe-expert|NVLink|NCCL_|already launched asynchronously")


def _moe(s: dict, hosts: int = 1) -> dict:
    """An EP group of every rank with 30 % of the step in exposed all-to-all (moe_exposed_a2a's trigger)."""
    ranks = [r["rank"] for r in s["ranks"]]
    step = s["ranks"][0]["step_time_ms"]
    s["moe"] = {"source": "split sizes", "role_source": "labels", "groups": [ranks],
                "ranks": [{"rank": r, "sent": 100, "received": 100, "dispatch_ms": 1.0, "combine_ms": 1.0,
                           "a2a_ms": 0.3 * step, "a2a_exposed_ms": 0.3 * step, "expert_ms": 1.0, "step_ms": step}
                          for r in ranks],
                "send_matrix": [[10] * len(ranks) for _ in ranks], "matrix_ranks": ranks, "imbalance": 1.0,
                "a2a_exposed_frac": 0.3, "dispatch_combine_frac": 0.05, "cross_node_groups": 1 if hosts > 1 else 0}
    for r in s["ranks"]:
        r["host"] = f"node{r['rank'] % hosts}"
    return s


def _exposed(s: dict, backend: str = "") -> dict:
    """Communication of an unknown group, 80 % exposed (exposed_comm's trigger); on GPU traces an idle
    attribution in which the host never waits in communication (on CPU traces there is none)."""
    for r in s["ranks"]:
        r["backend"] = backend
        if r["trace_kind"] == "gpu":
            r["idle"] = {"idle_ms": 1.0, "comm_wait_ms": 0.0, "unattributed_ms": 1.0}
        for c in r["comm_by_kind"]:
            c["pg"] = "misc"
            c["overlapped_ms"] = 0.2 * c["total_ms"]
            c["overlap_ratio"] = 0.2
        r["exposed_comm_ms"] = 0.8 * r["comm_ms"]
    return s


def _run(s: dict):
    return findings(typed(s))


def test_moe_exposed_on_cpu_names_no_gpu_tool():
    gpu = {f.id: f for f in _run(_moe(summary(4)))}
    cpu = {f.id: f for f in _run(_moe(summary(4, gpu=False)))}
    assert GPU_ONLY.search(gpu["moe_exposed_a2a"].action)  # the GPU run keeps its GPU tools
    assert not GPU_ONLY.search(cpu["moe_exposed_a2a"].action)
    assert "async_op=True" in cpu["moe_exposed_a2a"].action


def test_moe_cross_node_on_cpu_assumes_no_nvlink():
    cpu = {f.id: f for f in _run(_moe(summary(4, gpu=False), hosts=2))}
    f = cpu["moe_cross_node"]
    assert not GPU_ONLY.search(f.action) and f.gain_ms is None and "not quantified" in f.expected_gain
    gpu = {f.id: f for f in _run(_moe(summary(4), hosts=2))}
    assert gpu["moe_cross_node"].gain_ms  # GPU traces keep the NVLink estimate


def test_exposed_comm_on_cpu_makes_no_async_claim():
    gpu = {f.id: f for f in _run(_exposed(summary(4)))}
    cpu = {f.id: f for f in _run(_exposed(summary(4, gpu=False), "gloo"))}
    assert "already launched asynchronously" in gpu["exposed_comm"].action  # read from the GPU's idle
    assert not GPU_ONLY.search(cpu["exposed_comm"].action)
    assert "async_op=True" in cpu["exposed_comm"].action and "gloo" in cpu["exposed_comm"].action
    nccl = {f.id: f for f in _run(_exposed(summary(4, gpu=False), "nccl"))}  # a capture without GPU activity
    assert "gloo" not in nccl["exposed_comm"].action and not GPU_ONLY.search(nccl["exposed_comm"].action)


def test_nccl_trace_without_gpu_activity_is_not_called_gloo():
    from llmdiag.diagnose.model.devices import cpu_only_words, host_backends

    assert cpu_only_words(["gloo", "gloo"]) == "CPU-only (gloo)"
    assert "gloo" not in cpu_only_words(["nccl"]) and "no GPU activity" in cpu_only_words(["nccl"])
    assert "gloo" not in cpu_only_words([""])
    assert host_backends(["gloo", ""]) and not host_backends(["gloo", "nccl"])
    cpu = {f.id: f for f in _run(_moe(_exposed(summary(4, gpu=False), "nccl")))}
    assert "DeepEP" in cpu["moe_exposed_a2a"].action  # the job ran on GPUs: their tools apply


def test_cpu_caveat_comes_first():
    out = _run(_moe(summary(4, gpu=False)))
    assert out[0].id == "contaminated_timings" and out[0].severity == "low"
    assert any(f.severity == "high" for f in out[1:])  # it leads even where a high finding follows
    assert [f.id for f in _run(_moe(summary(4)))][0] != "contaminated_timings"  # GPU traces: no caveat
