"""Findings that misled an expert on pipeline and straggler traces (issue 23 item 4), pinned on generated
traces whose answers are set by construction."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import TraceBuilder
from tests.gen.pipeline_p2p import P2PCase
from tests.gen.pipeline_p2p import write as write_p2p

A2A = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


@pytest.mark.parametrize("batched", [True, False])
def test_stage_load_without_known_stages_is_no_straggler(tmp_path, batched):
    """4 stages named by a `mesh_pp` group, send/recv without peer ranks; the last stage carries the LM head and
    loss (+60 % compute). No rank is called a straggler for computing more, nor for arriving last at the
    all-reduce over the pipeline group (reached in the schedule's order): the stages are inferred (batched, with
    peers told across ranks), and the load is stage imbalance."""
    write_p2p(P2PCase(p=4, m=8, batched=batched, peer_ranks=False, last_extra_us=480, steps=3), tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.layout["pp"] == 4
    assert not [f for f in a.findings if f.id == "stragglers"], [f.evidence.text for f in a.findings]
    assert not a.skew.stragglers  # neither "compute above the median" nor "arrives last" across stages
    assert a.skew.schedule_ordered == a.skew.matched == 3
    assert a.pipeline is not None and a.pipeline.inferred  # batched: peers told across ranks (timematch.py)
    assert any(f.id == "pipeline_imbalance" for f in a.findings)


def test_stage_load_with_stages_unknown_is_no_straggler(tmp_path):
    """8 stages, batched without peer ranks: the middle stages' peers stay unknown (an issue line says why) and
    still no rank is called a straggler for the last stage's load."""
    write_p2p(P2PCase(p=8, m=4, batched=True, peer_ranks=False, last_extra_us=480, steps=3), tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.layout["pp"] == 8 and a.pipeline is None
    assert not [f for f in a.findings if f.id == "stragglers"] and not a.skew.stragglers
    (line,) = [i.message for i in a.issues if "pipeline layout unknown" in i.message]
    assert "no `Src Rank`/`Dst Rank`" in line and "nccl:coalesced" in line and "cannot be told" in line


def _dlrm(tmp_path, late: dict[int, dict[int, int]], steps: int = 8, ranks: int = 8):
    """`ranks` ranks; per step 4 ms of compute then one all_to_all (the embedding exchange) that every rank
    enters at 4.1 ms plus its lateness late[step][rank] (ms), all completing together 0.5 ms after the last."""
    pg = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": ranks, "ranks": list(range(ranks))}]
    for r in range(ranks):
        b = TraceBuilder(rank=r, world_size=ranks, host_name="node0", pg_config=pg)
        for k in range(steps):
            k0 = k * 20_000
            b.step(k + 1, k0, k0 + 19_000)
            mine = late.get(k, {}).get(r, 0) * 1000
            b.kernel("void gemm_kernel<float>()", k0 + 100, 4000 + mine, launch_at=k0 + 10)
            start = k0 + 4100 + mine
            end = k0 + 4100 + max(late.get(k, {0: 0}).values()) * 1000 + 500
            b.nccl("alltoall", start, end - start, name=A2A, nelems=1 << 20, group_size=ranks,
                   pg_ranks=list(range(ranks)), launch_at=k0 + 11)
        b.write(tmp_path / f"rank{r}.pt.trace.json.gz")
    return analyze_path(str(tmp_path), jobs=1)


def test_straggler_names_the_collective_and_every_late_rank(tmp_path):
    """Rank 7 enters 3 ms late at 5 of 8 all_to_alls, rank 5 1 ms late at the other 3: the finding names the
    all_to_all and its group, how often rank 7 was last there, and both late ranks with their mean lateness."""
    late = {k: {7: 3} for k in range(5)} | {k: {5: 1} for k in range(5, 8)}
    a = _dlrm(tmp_path, late)
    f = next(f for f in a.findings if f.id == "stragglers")
    ev = f.evidence.text
    assert "alltoall on pg 'default_pg" in ev and "8 matched" in ev, ev
    assert "rank 7 last at 5" in ev, ev
    assert "rank 7 3.00 ms ×5" in ev and "rank 5 1.00 ms ×3" in ev, ev
    assert a.skew.late_n_by_rank == {"7": 5, "5": 3}
    assert a.skew.by_collective[0].last_arrivals == {"5": 3, "7": 5}


def test_virtual_stage_findings_name_every_stage_of_the_rank(tmp_path):
    """Looped zero-bubble (v = 2) with the LM head on the last stage (7, on rank 3): the bubble matches the
    generator's exact answer and the imbalance finding names both stages the busy rank holds."""
    ans = write_p2p(P2PCase(p=4, m=8, schedule="zb", last_extra_us=300), tmp_path)
    a = analyze_path(str(tmp_path), jobs=1)
    assert a.pipeline.schedule == "zb" and a.pipeline.stages_per_rank == 2 and a.pipeline.microbatches == 8
    assert {b.rank: round(b.measured, 4) for b in a.pipeline.stage_bubbles} == {
        r: round(v, 4) for r, v in ans.bubble.items()}
    f = next(f for f in a.findings if f.id == "pipeline_imbalance")
    assert f.evidence.text.startswith("stages 3, 7 (rank 3)") and "to stages 0, 4" in f.action
