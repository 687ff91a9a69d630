"""A finding's words about a process group's role come from the role and layout the tables print
(diagnose.model.roles.pg_role over Analysis.layout), never from a second inference; DDP whose gradients fit
one bucket and whose all-reduces outlast the step's compute is told the levers that remain, not buckets.

Generated traces: two ranks on the default group, per step a 1 ms forward and a 2 ms backward kernel, and two
bf16 all-reduces (the gradient buckets) back to back from 1 ms into backward: 3 ms then 4 ms. The answer is
computed here from what is placed: comm 7 ms, overlapped 1.1 ms (the first bucket under the rest of
backward), exposed 5.9 ms, compute 3 ms, compute-only 1.9 ms (the gain's bound)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.manifest import layout_text
from llmdiag.diagnose.model.views import comm_by_group
from tests.gen.builder import TraceBuilder

REAL = (Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "real").resolve()
FWD, BWD, AR1, AR2, STEP = 1000, 2000, 3000, 4000, 20_000  # µs
BUCKETS = (2 << 20, 6 << 20)  # elements, bf16: 16 MiB of gradients, under torch's 25 MiB cap
COMM, OVERLAP = AR1 + AR2, BWD - 1000  # the first bucket starts 1 ms into backward
COMPUTE = FWD + BWD


def _trace(folder: Path, ddp: bool, bwd: int = BWD) -> str:
    for rank in range(2):
        b = TraceBuilder(rank=rank, world_size=2, host_name="node0")
        for k in range(1, 4):
            k0 = (k - 1) * STEP
            b.step(k, k0, k0 + STEP)
            if ddp:
                b.annotation("DistributedDataParallel.forward", k0 + 5, 30)
            b.cpu_op("autograd::engine::evaluate_function: ConvolutionBackward0", k0 + 40, 20)
            b.cpu_op("Optimizer.step#SGD.step", k0 + 70, 10)
            t = k0 + 100
            b.kernel("void fwd_conv_kernel<bf16>()", t, FWD, launch_at=k0 + 2)
            b.kernel("void bwd_conv_kernel<bf16>()", t + FWD, bwd, launch_at=k0 + 3)
            s = t + FWD + 1000
            b.nccl("allreduce", s, AR1, launch_at=k0 + 4, nelems=BUCKETS[0], dtype="BFloat16", group_size=2)
            b.nccl("allreduce", max(s + AR1, t + FWD + bwd), AR2, launch_at=k0 + 6, nelems=BUCKETS[1],
                   dtype="BFloat16", group_size=2)
        b.write(folder / f"rank{rank}.pt.trace.json.gz")
    return str(folder)


def _exposed(a):
    return next(f for f in a.findings if f.id == "exposed_comm")


def test_ddp_role_and_layout_named_as_the_table_shows(tmp_path):
    a = analyze_path(_trace(tmp_path, ddp=True), jobs=1)
    assert a.layout and layout_text(a.layout) == "dp=2"  # the DDP wrapper over the whole world
    assert {r.role for r in comm_by_group(a)} == {"dp"}
    f = _exposed(a)
    assert "pg 'default_pg' is data-parallel (dp, layout dp=2)" in f.action
    assert "not named" not in f.action and "bucket_cap_mb" not in f.action
    # the levers that remain, with the numbers placed: all-reduce time against all the step's compute
    assert f"{fmt(COMM / 1000, 'ms')} per step against {fmt(COMPUTE / 1000, 'ms')} of compute" in f.action
    assert fmt(sum(BUCKETS) * 2, "bytes") in f.action and "no_sync" in f.action
    assert f.gain_kind == "bound" and f.gain_ms == pytest.approx((COMPUTE - OVERLAP) / 1000, abs=0.01)
    assert "dp_overlap" not in [x.id for x in a.findings]


def test_ddp_with_long_backward_gets_no_link_advice(tmp_path):
    """Silent twin: backward (8 ms) longer than the all-reduces: overlap could hide them, so no 'levers'
    sentence; the role is still named from the layout."""
    a = analyze_path(_trace(tmp_path, ddp=True, bwd=8000), jobs=1)
    f = _exposed(a)  # the second bucket waits for the end of backward: 4 ms of 13 exposed
    assert "levers" not in f.action and "no_sync" not in f.action
    assert "pg 'default_pg' is data-parallel (dp, layout dp=2)" in f.action and "not named" not in f.action


def test_unknown_role_says_so(tmp_path):
    """Twin without the wrapper: no manifest, no role in the group's name, no DDP/FSDP op: the role is unknown
    in the table and the finding says nothing is inferred."""
    a = analyze_path(_trace(tmp_path, ddp=False), jobs=1)
    assert a.layout is None and {r.role for r in comm_by_group(a)} == {"?"}
    f = _exposed(a)
    assert "the role of pg 'default_pg' (allreduce) is not named in the trace" in f.action
    assert "DDP" not in f.action and "data-parallel" not in f.action


@pytest.mark.real
def test_real_mi300_ddp_role_layout_and_link_advice():
    path = REAL / "tracelens" / "mi300_ddp8_actckpt_rank0.json.gz"
    a = analyze_path(str(path), jobs=1)
    with gzip.open(path) as fh:
        ev = json.load(fh)["traceEvents"]
    # DDP's buckets, each all-reduced once per step: the distinct message sizes of the reducer's all-reduces
    buckets = {e["args"]["In msg nelems"] for e in ev if e.get("name") == "record_param_comms"
               and e.get("args", {}).get("Collective name") == "allreduce"}
    assert any(e.get("name", "").startswith("DistributedDataParallel.forward") for e in ev)
    rows = comm_by_group(a)
    assert {r.role for r in rows if r.pg == "default_pg"} == {"dp"}
    f = _exposed(a)
    assert f"pg 'default_pg' is data-parallel (dp, layout {layout_text(a.layout)})" in f.action
    assert layout_text(a.layout) == "dp=8" and "not named" not in f.action
    grad = sum(buckets) * 2  # bf16
    assert 0 < grad <= 25 * 2**20 and fmt(grad, "bytes") in f.action  # fits torch's default 25 MiB bucket
    assert "bucket_cap_mb" not in f.action and "no_sync" in f.action and "PowerSGD" in f.action
    assert f.gain_ms <= a.ranks[0].compute_only_ms + 1e-6


def test_role_note_names_known_roles_and_only_the_unknown_as_unnamed():
    from llmdiag.diagnose.model.roles import role_note

    lay = {"dp": 4, "fsdp": 1, "tp": 2, "pp": 1, "cp": 1}
    got = role_note({("allreduce", "mesh_tp"): "tp", ("alltoall", ""): "?", ("allreduce", ""): "dp"}, lay)
    assert got == ("the allreduce (no group in the trace) is data-parallel (dp, layout dp=4 × tp=2); "
                   "pg 'mesh_tp' is tensor-parallel (tp, layout dp=4 × tp=2); the role of the alltoall (no group "
                   "in the trace) is not named in the trace, so no parallel-layout setting is inferred for it")
    assert role_note({("allreduce", "mesh_dp"): "dp"}, None) == "pg 'mesh_dp' is data-parallel (dp, from its name)"
