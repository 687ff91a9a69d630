"""Expert parallelism, gradient accumulation and ZeRO-1: they train like one process, and the analyzer reads
MoE traffic back exactly.

Fast in-process tests check the MoE layer against a per-token loop and the planted routing against a count
written out by hand. The runs start the real CLI (torchrun, gloo, 2-4 CPU processes, tiny model, 3 steps,
~8-15 s each) and compare every rank's losses with the single-process reference. The skew run plants a known
routing (`--moe-route-skew`) whose token counts are computed here independently and must be read back from
the trace's all-to-all split sizes exactly. Generated GPU traces (tests/gen/moe.py: NCCL all_to_allv with
split sizes, and DeepEP kernels with none) must give the figures the generator computed.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.reports.render import render_html
from tests.gen.moe import moe_ep_ranks
from llmdiag.workloads.config import model_config
from llmdiag.workloads.moe import MoE, planted_experts
from llmdiag.workloads.options import RunOptions
from llmdiag.workloads.reference import reference_losses

STEPS = ["--profile-steps", "0,1,1", "--steps", "3"]
MOE = ["--moe-experts", "4", "--moe-topk", "2"]
PARITY = [  # (id, workload, extra args): every new code path once
    ("ep2", "ep2", MOE),
    ("dp4ep2", "dp4ep2", MOE),  # two EP groups: expert gradients summed over the edp group
    ("fsdp2ep2", "fsdp2ep2", MOE),  # experts left out of FSDP (ignored_params)
    ("tp2ep2", "tp2ep2", MOE),  # experts replicated over tp, replicate() ignoring them
    ("pp2ep2", "pp2ep2", MOE),  # MoE inside pipeline stages (1f1b, 4 microbatches): the aux gradient per microbatch
    ("dp2-accum4", "dp2", ["--grad-accum", "4"]),
    ("fsdp2-accum4", "fsdp2", ["--grad-accum", "4"]),
    ("dp2-zero1", "dp2", ["--zero", "1"]),
    ("fsdp2-accum4-keep", "fsdp2", ["--grad-accum", "4", "--accum-keep-gathered"]),
]


# -- fast, in-process ------------------------------------------------------------------------------------------
def _hand_counts(tokens: int, experts: int, topk: int, skew: float) -> list[int]:
    """The planted routing, counted one token at a time as the docstring of workloads.moe states it."""
    counts = [0] * experts
    hot = round(skew * tokens)
    for j in range(tokens):
        for c in range(topk):
            counts[c if j < hot else (j + c) % experts] += 1
    return counts


@pytest.mark.parametrize("tokens,experts,topk,skew", [(256, 4, 2, 0.5), (100, 8, 2, 0.3), (64, 4, 1, 0.0)])
def test_planted_routing_counts(tokens, experts, topk, skew):
    idx = planted_experts(tokens, experts, topk, skew)
    assert torch.bincount(idx.reshape(-1), minlength=experts).tolist() == _hand_counts(tokens, experts, topk, skew)
    assert all(len(set(row)) == topk for row in idx.tolist())  # distinct experts per token


def test_moe_layer_matches_a_per_token_loop():
    torch.manual_seed(0)
    cfg = model_config("tiny", moe_experts=4, moe_topk=2)
    layer = MoE(cfg)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.05)
    x = torch.randn(2, 5, cfg.hidden)
    y = layer(x)
    probs = torch.softmax(x @ layer.router.weight.T, -1)
    for b in range(2):
        for s in range(5):
            top, idx = probs[b, s].topk(2)
            want = sum(w / top.sum() * layer.experts[str(int(e))](x[b, s][None])[0] for w, e in zip(top, idx))
            assert torch.allclose(y[b, s], want, atol=1e-6)


def test_capacity_factor_drops_the_overflow():
    cfg = model_config("tiny", moe_experts=4, moe_topk=1, moe_route_skew=1.0, moe_capacity=1.0)
    layer = MoE(cfg)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.05)
    layer(torch.randn(1, 16, cfg.hidden))
    assert layer.last_counts.tolist() == [4, 0, 0, 0]  # all 16 want expert 0; capacity 1.0 x 16 x 1 / 4 = 4


# -- runs ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory, llmdiag_run):
    base = tmp_path_factory.mktemp("moe")
    done: dict[str, str] = {}

    def get(key: str, workload: str, args: list[str], steps: list[str] = STEPS) -> str:
        if key not in done:
            out = str(base / key)
            llmdiag_run(out, workload, *steps, *args)
            done[key] = out
        return done[key]

    return get


@pytest.mark.parametrize("key,workload,args", PARITY, ids=[p[0] for p in PARITY])
def test_layout_trains_like_one_process(runs, key, workload, args):
    out = runs(key, workload, args)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    expected = reference_losses(RunOptions.from_argv(["--workload", workload, "--out", "-", *STEPS, *args]), 3)
    assert m["status"] == "ok"
    for r, st in m["rank_status"].items():
        assert st["losses"] == pytest.approx(expected, rel=2e-5), f"rank {r}"
    assert expected[-1] < expected[0]


def test_planted_skew_is_read_back_exactly_and_ranks_first(runs):
    # Profile the third step: DDP's second iteration broadcasts its rebuilt bucket order (a one-off
    # gloo:broadcast that would otherwise read as exposed communication in the only profiled step).
    out = runs("ep2-skew", "ep2", [*MOE, "--moe-route-skew", "0.5"], ["--profile-steps", "1,1,1", "--steps", "4"])
    a = analyze_path(out)
    m = a.moe
    # 8 sequences / dp2 = 4 x 64 tokens per rank; experts 0-1 live on rank 0, 2-3 on rank 1
    per_expert = _hand_counts(4 * 64, 4, 2, 0.5)
    to_rank = [sum(per_expert[:2]), sum(per_expert[2:])]  # what each source sends each rank, per layer
    layers = model_config("tiny").layers
    assert m.source == "split sizes" and m.role_source == "labels"
    assert len(m.layers) == layers  # one profiled step, one dispatch per layer
    assert all(x.received == [2 * to_rank[0], 2 * to_rank[1]] for x in m.layers)
    assert [r.received for r in m.ranks] == [2 * to_rank[0] * layers, 2 * to_rank[1] * layers]
    assert m.send_matrix == [[to_rank[0] * layers, to_rank[1] * layers]] * 2
    assert m.imbalance == pytest.approx(2 * to_rank[0] / (to_rank[0] + to_rank[1]))  # 1.5
    assert m.hot_rank == 0
    # The plant is found and blames the hot rank. Where it ranks among the findings is not asserted: severity
    # and order follow each finding's gain (one rule, docs/recommendations.md), and gains measured on two
    # shared cores move with the machine's load (gloo's blocking all-to-all, exposed communication, can
    # outrank it on one run and not the next).
    imb = [f for f in a.findings if f.id == "moe_imbalance"]
    assert len(imb) == 1 and 0 in imb[0].evidence.ranks, imb
    back = Analysis.from_dict(a.to_dict())  # the summary keeps the MoE figures and findings exactly
    assert back.moe == m and [f.id for f in back.findings] == [f.id for f in a.findings]


def test_without_the_knob_the_imbalance_rule_is_silent(runs):
    a = analyze_path(runs("ep2", "ep2", MOE))
    assert a.moe is not None and a.moe.imbalance < 1.25
    assert "moe_imbalance" not in [f.id for f in a.findings]


def test_fsdp_accumulation_regathers_and_the_fix_gathers_once(runs):
    """fsdp2, tiny (4 blocks + root), 4 microsteps: FSDP2 gathers 5 groups in each forward and re-gathers the 4
    blocks in each backward (36 per step) and reduce-scatters 5 once; with --accum-keep-gathered it gathers the
    5 groups once. The rule fires on the first (its bound: the gathers of microsteps 2-4) and not the second."""
    def kinds(a):
        return {c.kind: c.count for c in a.ranks[0].comm_by_kind}

    a = analyze_path(runs("fsdp2-accum4", "fsdp2", ["--grad-accum", "4"]))
    assert a.accum.microsteps == 4 and kinds(a) == {"allgather": 4 * (5 + 4), "reducescatter": 5}
    assert "accum_fsdp_regather" in [f.id for f in a.findings]
    b = analyze_path(runs("fsdp2-accum4-keep", "fsdp2", ["--grad-accum", "4", "--accum-keep-gathered"]))
    assert b.accum.microsteps == 4 and kinds(b) == {"allgather": 5, "reducescatter": 5}
    assert b.accum.regather_ms_per_step == 0 and "accum_fsdp_regather" not in [f.id for f in b.findings]


def test_dense_runs_have_no_moe_section(runs):
    a = analyze_path(runs("dp2-zero1", "dp2", ["--zero", "1"]))
    assert a.moe is None


# -- generated GPU traces ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["nccl", "deepep"])
def test_generated_gpu_moe_trace_gives_the_cpu_runs_figures(tmp_path, mode):
    """The ep2 skew run's structure (each rank sends 384 rows to rank 0 and 128 to rank 1 per layer, 4 layers)
    on GPU: NCCL all_to_allv gives tokens and imbalance from split sizes; DeepEP gives the same imbalance from
    the expert GEMM time (which follows the tokens), and both give the kernel times the generator placed."""
    per_expert = _hand_counts(256, 4, 2, 0.5)
    row = [sum(per_expert[:2]), sum(per_expert[2:])]
    traces, exp = moe_ep_ranks([row, row], mode=mode)
    for r, b in enumerate(traces):
        b.write(tmp_path / f"rank{r}.pt.trace.json.gz")
    a = analyze_path(str(tmp_path))
    m = a.moe
    if mode == "nccl":
        assert m.source == "split sizes"
        assert [r.received for r in m.ranks] == exp.received  # per step, over the 2 steps
        assert m.imbalance == pytest.approx(exp.imbalance)
    else:
        assert m.source == "kernels" and m.imbalance is None
    assert m.expert_imbalance == pytest.approx(exp.imbalance)
    assert m.slow_expert_rank == 0
    for r in m.ranks:
        assert r.dispatch_ms == pytest.approx(exp.dispatch_ms)
        assert r.combine_ms == pytest.approx(exp.combine_ms)
        assert r.a2a_ms == pytest.approx(exp.a2a_ms)
        assert r.expert_ms == pytest.approx(exp.expert_ms[r.rank])
        assert r.step_ms == pytest.approx(exp.step_ms)
    assert "moe_imbalance" in [f.id for f in a.findings]
    assert m.dispatch_combine_frac == pytest.approx((exp.dispatch_ms + exp.combine_ms) / exp.step_ms)
    html = render_html(a)
    assert 'id="moe"' in html and ('fig-moe-send' in html) == (mode == "nccl")
    if mode == "nccl":  # the heatmap prints the send matrix: 384 x 4 layers to rank 0, 128 x 4 to rank 1
        assert m.send_matrix == [[4 * row[0], 4 * row[1]]] * 2 and ">1,536<" in html and ">512<" in html
    # The terminal prints the same MoE figures as the report, cell for cell.
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.diagnose.model.moe_view import moe_cards, moe_rank_rows

    text = render(a, width=200)
    for label, value, _ in moe_cards(m):
        assert f"  {label}: {value}" in text and f">{value}<" in html
    for cells in moe_rank_rows(m):
        assert any(line.split() == cells for line in text.splitlines())
        assert "".join(f'<td class="r">{c}</td>' for c in cells[1:]) in html


def test_exposed_dispatch_combine_and_ep_across_nodes(tmp_path):
    """The generated dispatch/combine overlap nothing: moe_exposed_a2a's bound is the whole all-to-all time. Two
    EP ranks per host, one EP group of 4: half of each rank's copies cross nodes."""
    send = [[100] * 4 for _ in range(4)]
    traces, exp = moe_ep_ranks(send, layers=2, steps=2)
    for r, b in enumerate(traces):
        b.host_name = f"node{r // 2}"
        b.write(tmp_path / f"rank{r}.pt.trace.json")
    a = analyze_path(str(tmp_path))
    ids = [f.id for f in a.findings]
    assert a.moe.imbalance == pytest.approx(1.0) and "moe_imbalance" not in ids
    exposed = next(f for f in a.findings if f.id == "moe_exposed_a2a")
    assert exposed.gain_ms == pytest.approx(exp.a2a_ms) and exposed.gain_kind == "bound"
    cross = next(f for f in a.findings if f.id == "moe_cross_node")
    assert a.moe.cross_node_groups == 1
    assert cross.gain_ms == pytest.approx(exp.a2a_ms * 0.5 * (1 - 1 / 9), abs=1e-6)  # stored to the µs


def test_foreign_trace_without_labels_pairs_dispatch_and_combine_by_their_splits(tmp_path):
    """No llmdiag labels, forward and backward all-to-alls: dispatches are recognised by their transposed
    combine; forward and backward dispatches both count (2 x the rows), the imbalance is the same 1.5."""
    per_expert = _hand_counts(256, 4, 2, 0.5)
    row = [sum(per_expert[:2]), sum(per_expert[2:])]
    traces, exp = moe_ep_ranks([row, row], labels=False, backward=True)
    for r, b in enumerate(traces):
        b.write(tmp_path / f"rank{r}.pt.trace.json")
    m = analyze_path(str(tmp_path)).moe
    assert m.role_source == "order" and m.source == "split sizes"
    assert [r.received for r in m.ranks] == [2 * x for x in exp.received]
    assert m.imbalance == pytest.approx(1.5) and m.worst_layer_imbalance == pytest.approx(1.5)
    assert len(m.layers) == 2 * 2 * 4  # 2 steps x (4 forward + 4 backward) dispatches


def test_gloo_split_sizes_are_untrusted_text(tmp_path):
    """gloo all-to-alls carry their splits only in Concrete Inputs: the loader files them under NCCL's split keys
    in the same one parse; well-formed lists are read, anything else (not a list, negative, bool, mismatched
    lengths, missing) is skipped without an error."""
    from llmdiag.diagnose.io.loader import load_trace
    from llmdiag.diagnose.metrics.rank.moe import _ints
    from tests.gen.builder import TraceBuilder

    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    b.step(1, 0, 1000)
    bad = [["", "", "", "[1, x]", "[2, 3]", "False", "-1"], ["", "", "", "[-1, 2]", "[2, 3]"],
           ["", "", "", "[true, 2]", "[2, 3]"], ["", "", "", "[1, 2, 3]", "[2, 3]"], ["", ""], "[1, 2]",
           ["", "", "", "[]", "[]"], ["", "", "", "[[1], 2]", "[2, 3]"]]
    for k, ci in enumerate(bad):
        b.cpu_op("c10d::alltoall_base_", 10 + 10 * k, 5, args={"Concrete Inputs": ci})
    b.cpu_op("c10d::alltoall_base_", 200, 5, args={"Concrete Inputs": ["", "", "", "[7, 1]", "[4, 4]", "False", "-1"]})
    path = b.write(tmp_path / "rank0.pt.trace.json")
    t = load_trace(path)
    splits = [(_ints(a.get("In split size")), _ints(a.get("Out split size"))) for a in t.comm_args.values()]
    assert [(s, r) for s, r in splits if s and r and len(s) == len(r)] == [([4, 4], [7, 1])]
    assert not any("Concrete Inputs" in a for a in t.comm_args.values())
    a = analyze_path(str(tmp_path))
    assert a.moe is not None and a.moe.ranks[0].sent == 0  # unpaired, unlabelled: not a dispatch


def test_reports_without_moe_have_no_section(tmp_path):
    from tests.gen.builder import gpu_rank

    for r in range(2):
        gpu_rank(r).write(tmp_path / f"rank{r}.pt.trace.json")
    a = analyze_path(str(tmp_path))
    assert a.moe is None and 'id="moe"' not in render_html(a)
