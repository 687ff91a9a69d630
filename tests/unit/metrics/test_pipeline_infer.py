"""Pipeline detection without labels (issue 13 item 4) on generated Megatron-style traces with exact answers.

tests/gen/pipeline.py simulates the schedule itself and writes only kernels, send/recv and host ops: no `PP:`
spans, no manifest. The analyzer must find the stages from the send/recv peers, the microbatches from the
transfers, forward/backward from their direction, and give each stage's bubble within 1 point of the
simulation's; the formula (p−1)/(m+p−1) is checked beside it.
"""

from __future__ import annotations

import orjson
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.job.layout import layout_from_pg
from llmdiag.diagnose.model.roles import pg_role
from llmdiag.diagnose.model.views import comm_by_group
from tests.gen.builder import TraceBuilder
from tests.gen.pipeline import GEMM, SENDRECV, Case, build, write


def _formula(p: int, m: int) -> float:
    return (p - 1) / (m + p - 1)


def _run(tmp_path, case: Case):
    ans = write(case, tmp_path)
    return analyze_path(str(tmp_path), jobs=1), ans


@pytest.mark.parametrize("slow", [False, True])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("m", [4, 8, 16])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_stage_bubbles_without_labels(tmp_path, p, m, schedule, slow):
    case = Case(p, m, schedule, slow_stage=1 if slow else None, lat_us=0 if not slow else 20)
    a, ans = _run(tmp_path, case)
    pl = a.pipeline
    assert pl is not None, [i.message for i in a.issues]
    assert (pl.stages, pl.microbatches, pl.schedule) == (p, m, schedule)
    assert pl.theory == pytest.approx(_formula(p, m))
    if not slow:  # equal stages, free transfers: the simulation is the formula
        assert all(b == pytest.approx(_formula(p, m)) for b in ans.bubble.values())
    got = {b.stage: b for b in pl.stage_bubbles}
    assert sorted(got) == list(range(p))
    for s, b in got.items():
        assert b.rank == case.rank(s)
        assert abs(b.measured - ans.bubble[s]) < 0.01, (s, b.measured, ans.bubble[s])
        assert b.theory == pytest.approx(_formula(p, m))
        assert b.replay is not None
    assert not any("pipeline layout unknown" in i.message for i in a.issues)


def test_stage_order_comes_from_peers_not_rank_numbers(tmp_path):
    """Stages on ranks 6, 4, 2, 0 (stage 0 on rank 6): the chain of neighbours gives the order."""
    case = Case(4, 8, "1f1b", base_rank=6, rank_stride=-2, slow_stage=3)
    a, ans = _run(tmp_path, case)
    assert {b.stage: b.rank for b in a.pipeline.stage_bubbles} == {0: 6, 1: 4, 2: 2, 3: 0}
    assert {b.stage: round(b.measured, 4) for b in a.pipeline.stage_bubbles} == \
        {s: round(v, 4) for s, v in ans.bubble.items()}


def test_issue_symptom_4_stage_1f1b_slow_last_stage(tmp_path):
    """Issue 13: a 4-stage 1F1B trace, 8 microbatches, slow last stage, no labels got no pipeline section and
    stage 0 (which by the schedule finishes its backward last) was named a straggler at the all-reduce after
    the pipeline. Now: the section is there, the slow stage is the busiest, and stage 0 is no straggler."""
    case = Case(4, 8, "1f1b", slow_stage=3, steps=4, optimizer_us=700)  # an optimizer step after the pipeline
    a, ans = _run(tmp_path, case)
    assert a.pipeline is not None and a.pipeline.stages == 4 and a.pipeline.microbatches == 8
    assert max(a.pipeline.stage_bubbles, key=lambda b: b.busy_ms).stage == 3
    assert {b.stage: round(b.measured, 6) for b in a.pipeline.stage_bubbles} == \
        {s: round(v, 6) for s, v in ans.bubble.items()}  # the optimizer's kernels are no pipeline action
    # Stage 0 does arrive last at every all-reduce: the schedule's order, not a straggler.
    assert all(x.late_ranks[-1] == 0 and x.schedule_ordered for x in a.skew.late)
    assert a.skew.schedule_ordered == 4
    assert 0 not in {s.rank for s in a.skew.stragglers}
    assert a.skew.last_arrivals == {}
    assert a.skew.late_ms_by_rank == a.skew.imposed_ms_by_rank == {}  # nothing to blame on anyone
    assert a.pipeline.inferred and a.layout["pp"] == 4  # inferred, and said so
    roles = {(r.kind, r.role) for r in comm_by_group(a)}
    assert roles == {("send", "pp"), ("recv", "pp"), ("allreduce", "pp")}  # the all-reduce spans the stages


def test_send_recv_that_is_no_pipeline_is_unknown(tmp_path):
    """A ring (each rank receives from one neighbour and sends to the other, as ring attention does) has no
    stage 0 and no backward traffic: no pipeline section, and the issue list says why."""
    for r in range(4):
        b = TraceBuilder(rank=r, world_size=4)
        for k in range(2):
            k0 = k * 10_000
            b.step(k + 1, k0, k0 + 10_000)
            for i in range(3):
                t0 = k0 + 100 + i * 2000
                b.nccl("recv", t0, 300, stream=41, launch_at=k0 + 10 + i, name=SENDRECV, pg_ranks=[0, 1, 2, 3])
                b.events[-1]["args"]["Src Rank"] = (r - 1) % 4
                b.nccl("send", t0, 300, stream=40, launch_at=k0 + 20 + i, name=SENDRECV, pg_ranks=[0, 1, 2, 3])
                b.events[-1]["args"]["Dst Rank"] = (r + 1) % 4
                b.kernel(GEMM, t0 + 400, 1000, launch_at=k0 + 30 + i)
        b.write(tmp_path / f"rank{r}.json")
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.pipeline is None
    assert any("pipeline layout unknown" in i.message for i in a.issues)
    assert {r.role for r in comm_by_group(a) if r.kind in ("send", "recv")} == {"?"}  # not given role pp


@pytest.mark.parametrize("kind", ["send", "recv", "sendrecv"])
def test_point_to_point_is_pipeline_traffic_only_with_a_pipeline(kind):
    assert pg_role(kind, "0", 8, {"dp": 8}) == "?"
    assert pg_role(kind, "0", 8, None) == "?"
    assert pg_role(kind, "0", 2, {"pp": 4, "dp": 2}) == "pp"
    assert pg_role(kind, "PIPELINE_MODEL_PARALLEL_GROUP", 4, None) == "pp"
    assert pg_role("allreduce", "DATA_PARALLEL_GROUP", 4, {"tp": 2, "dp": 4}) == "dp"


def test_megatron_group_descriptions_give_the_layout(tmp_path):
    """Megatron-core names its groups (group_desc): the layout's pp is then known, not inferred."""
    dist = {"pg_config": [{"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "pg_size": 2},
                          {"pg_name": "2", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "pg_size": 4},
                          {"pg_name": "3", "pg_desc": "DATA_PARALLEL_GROUP", "pg_size": 2},
                          {"pg_name": "4", "pg_desc": "MODEL_PARALLEL_GROUP", "pg_size": 8}]}
    assert layout_from_pg(dist, 16) == {"dp": 2, "fsdp": 1, "tp": 2, "pp": 4, "cp": 1}
    a, ans = _run(tmp_path, Case(4, 4, "gpipe", pg_desc="PIPELINE_MODEL_PARALLEL_GROUP"))
    assert a.layout["pp"] == 4 and a.pipeline.stages == 4 and a.pipeline.inferred
    assert {r.role for r in comm_by_group(a)} == {"pp"}  # send, recv and the all-reduce on the pipeline group


def test_a_missing_stage_leaves_the_pipeline_unknown(tmp_path):
    builders, _ = build(Case(4, 4, "1f1b"))
    for b in builders:
        if b.rank != 2:
            b.write(tmp_path / f"rank{b.rank}.json")
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.pipeline is None
    assert any("rank 2, the next stage of rank 1, has no usable trace" in i.message for i in a.issues)


def test_two_pipeline_replicas(tmp_path):
    """dp=2 × pp=4: ranks 0-3 and 4-7 are two chains; the second has a slow stage 2. Each stage's bubble
    is its own replica's."""
    a1 = write(Case(4, 8, "1f1b"), tmp_path, world_size=8)
    a2 = write(Case(4, 8, "1f1b", base_rank=4, slow_stage=2), tmp_path, world_size=8)
    a = analyze_path(str(tmp_path), jobs=1)
    got = {b.rank: b.measured for b in a.pipeline.stage_bubbles}
    want = {s: a1.bubble[s] for s in range(4)} | {4 + s: a2.bubble[s] for s in range(4)}
    assert got == pytest.approx(want, abs=1e-9)
    assert a.pipeline.stages == 4


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_uneven_actions_and_launch_gaps(tmp_path, schedule):
    """Costs that vary per microbatch, five kernels per action with launch gaps between them, slow transfers:
    each stage's bubble is still the simulation's, and the gaps do not split an action."""
    case = Case(4, 8, schedule, slow_stage=2, jitter_us=60, split_kernels=5, lat_us=15, optimizer_us=300)
    a, ans = _run(tmp_path, case)
    assert (a.pipeline.microbatches, a.pipeline.schedule) == (8, schedule)
    for b in a.pipeline.stage_bubbles:
        assert abs(b.measured - ans.bubble[b.stage]) < 0.01
        assert b.busy_ms == pytest.approx(ans.busy_us[b.stage] / 1000)


def test_cli_reports_the_inferred_pipeline(tmp_path):
    """End to end through `llmdiag analyze`: exit 0, the summary carries the inferred pipeline, the terminal
    says it was inferred."""
    from click.testing import CliRunner

    from llmdiag.diagnose.cli.main import main

    write(Case(4, 8, "1f1b", slow_stage=3), tmp_path / "run")
    js = tmp_path / "s.json"
    r = CliRunner().invoke(main, ["analyze", str(tmp_path / "run"), "--json", str(js), "--no-report", "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "Inferred from send/recv" in r.output
    d = orjson.loads(js.read_bytes())
    assert d["pipeline"]["inferred"] is True and d["pipeline"]["stages"] == 4 and d["layout"]["pp"] == 4


def test_peers_from_the_launching_host_op(tmp_path):
    """Kernels without args: the peers, groups and sequence numbers come from the `record_param_comms` op the
    kernel was launched under (classification links them), and the pipeline is read the same."""
    case = Case(4, 8, "1f1b", slow_stage=3, kernel_args=False, steps=3)
    a, ans = _run(tmp_path, case)
    assert a.pipeline is not None and a.pipeline.inferred, [i.message for i in a.issues]
    assert {b.stage: round(b.measured, 6) for b in a.pipeline.stage_bubbles} == \
        {s: round(v, 6) for s, v in ans.bubble.items()}
    assert a.skew.schedule_ordered == 3 and 0 not in {s.rank for s in a.skew.stragglers}
