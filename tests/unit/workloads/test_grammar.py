"""Workload strings, layout checks, options and the torch-free launch path. Fast: no process starts here
except the CLI's own (which must exit 2 before torch is imported) and a bash syntax check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmdiag.workloads.config import SIZES, model_config
from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.grammar import DIMS, SCHEDULES, Layout, Pipeline, parse_workload, resolve
from llmdiag.workloads.options import RunOptions
from llmdiag.workloads.optspec import to_argv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TINY = SIZES["tiny"]


@pytest.mark.parametrize("text,layout", [
    ("single", Layout()),
    ("dp1", Layout()),
    ("dp2", Layout(dp=2)),
    ("fsdp8", Layout(fsdp=8)),
    ("pp4", Layout(pp=4)),
    ("tp4pp2", Layout(tp=4, pp=2)),
    ("pp2tp4", Layout(tp=4, pp=2)),
    ("dp2tp2pp2", Layout(dp=2, tp=2, pp=2)),
    ("tp2cp2", Layout(tp=2, cp=2)),
    ("dp2fsdp2tp2pp2cp2", Layout(dp=2, fsdp=2, tp=2, pp=2, cp=2)),
    ("TP2PP2", Layout(tp=2, pp=2)),
    ("tp16", Layout(tp=16)),
    ("ep2", Layout(dp=2, ep=2)),  # ep borrows its ranks from data parallel: alone it implies dp = ep
    ("dp4ep2", Layout(dp=4, ep=2)),
    ("fsdp2ep2tp2", Layout(fsdp=2, ep=2, tp=2)),
])
def test_good_strings(text, layout):
    assert parse_workload(text) == layout


@pytest.mark.parametrize("text,needle", [
    ("tp0", "must be >= 1"),
    ("tpx", "tp needs a size"),
    ("tp", "tp needs a size"),
    ("tp2tp2", "tp given twice"),
    ("", "empty"),
    ("foo", "unexpected 'foo'"),
    ("tp2 pp2", "unexpected"),
    ("tp-1", "tp needs a size"),
    ("dp2x", "unexpected 'x'"),
    ("xp2", "unexpected"),
    ("dp3ep2", "ep2 must divide dp x fsdp = 3"),
])
def test_bad_strings_raise_one_line(text, needle):
    with pytest.raises(WorkloadError) as e:
        parse_workload(text)
    assert needle in str(e.value) and "\n" not in e.value.line()


@given(st.dictionaries(st.sampled_from(DIMS), st.integers(1, 16), min_size=1))
def test_any_concatenation_parses_and_world_size_is_the_product(sizes):
    text = "".join(f"{d}{n}" for d, n in sizes.items())
    lay = parse_workload(text)
    expected = 1
    for n in sizes.values():
        expected *= n
    assert lay.world_size == expected
    assert lay.mesh_dims == [d for d in ("pp", "dp", "fsdp", "cp", "tp") if sizes.get(d, 1) > 1]


@given(st.dictionaries(st.sampled_from(DIMS), st.integers(1, 4), min_size=1))
def test_coords_are_row_major_and_a_bijection(sizes):
    lay = Layout(**sizes)
    coords = [lay.coords(r) for r in range(lay.world_size)]
    assert len({tuple(c.values()) for c in coords}) == lay.world_size
    assert all(coords[r]["tp"] == r % lay.tp for r in range(lay.world_size))  # tp innermost: neighbours
    assert all(coords[r]["pp"] == r // (lay.world_size // lay.pp) for r in range(lay.world_size))


@pytest.mark.parametrize("workload,kw,needle", [
    ("tp3", {}, "8 attention heads are not divisible by 3"),
    ("tp8", {}, "4 kv heads are not divisible by 8"),
    ("pp8", {}, "8 pipeline stages but the model has 4 layers"),
    ("pp4", {"schedule": "interleaved1f1b"}, "8 pipeline stages"),
    ("dp2", {"schedule": "gpipe"}, "need a pp dimension"),
    ("pp2", {"schedule": "1f1b", "microbatches": 1}, "1f1b needs microbatches >= pp"),
    ("pp2", {"schedule": "dualpipev", "microbatches": 3}, "dualpipev needs microbatches >= stages (4)"),
    ("pp2", {"schedule": "nope"}, "unknown pipeline schedule"),
    ("cp3", {}, "not divisible by 3"),
    ("tp2", {"sp": True, "model": replace(TINY, seq_len=63)}, "cp x tp with --sp"),
    ("dp2", {"sp": True}, "--sp (sequence parallel) needs a tp dimension"),
    ("tp4", {"ranks_available": 2}, "needs 4 ranks but 2 are available"),
    ("dp2", {"model": replace(TINY, batch=7), "batch_given": True}, "--batch 7 is not divisible"),
    ("ep2", {}, "ep2 needs a MoE model"),
    ("ep4", {"model": replace(TINY, moe_experts=6)}, "6 experts are not divisible by 4"),
    ("dp2cp2", {"model": replace(TINY, moe_experts=4)}, "with cp"),
    ("tp2", {"model": replace(TINY, moe_experts=4), "sp": True}, "with --sp"),
    ("pp2", {"grad_accum": 2}, "--grad-accum with pp"),
    ("dp2", {"grad_accum": 0}, "--grad-accum must be >= 1"),
    ("fsdp2", {"zero": 1}, "--zero 1 needs a plain dpN layout"),
    ("dp2", {"zero": 2}, "only 0 or 1"),
    ("dp2", {"model": replace(TINY, batch=6), "batch_given": True, "grad_accum": 4}, "--batch 6 is not divisible"),
])
def test_layouts_the_model_cannot_take(workload, kw, needle):
    kw = dict(kw)
    model = kw.pop("model", TINY)
    with pytest.raises(WorkloadError) as e:
        resolve(workload, model, **kw)
    assert needle in str(e.value)


def test_ep_groups_partition_the_data_parallel_replicas():
    """dp4ep2 on tp2: EP groups are consecutive replicas with the same tp coordinate; edp joins equal ep coords."""
    lay = parse_workload("dp4ep2tp2")
    ep, edp = lay.ep_groups()
    assert ep == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert edp == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert sorted(r for g in ep for r in g) == list(range(8)) and lay.world_size == 8
    assert [lay.ep_coords(r) for r in (0, 2, 4, 6)] == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_moe_config_counts_every_expert_and_flops_only_the_active_ones():
    dense, moe = TINY, model_config("tiny", moe_experts=4, moe_topk=2, moe_every=2)
    h, f = TINY.hidden, TINY.ffn
    assert moe.moe_layers == 2  # layers 0 and 2
    assert moe.params() - dense.params() == 2 * (h * 4 + 3 * 3 * h * f)
    assert moe.active_params() - dense.params() == 2 * (h * 4 + 3 * 1 * h * f)
    assert resolve("dp2", TINY, grad_accum=4).micro_batch == 1  # 8 sequences / dp2 / 4 microsteps


def test_defaults_fill_schedule_microbatches_and_round_the_batch():
    p = resolve("tp2pp2", TINY)
    assert (p.pipeline.schedule, p.pipeline.microbatches, p.global_batch, p.micro_batch) == ("1f1b", 4, 8, 2)
    assert resolve("dp4pp2", TINY).global_batch == 16  # 8 rounded up to dp x m = 16
    assert resolve("dp3", TINY).global_batch == 9
    p = resolve("fsdp2tp2", TINY)
    assert (p.local_batch, p.tokens_per_step) == (4, 8 * 64)
    assert p.model_flops_per_step == pytest.approx(TINY.flops_per_token() * 512)


@pytest.mark.parametrize("schedule,pp,layers", [("1f1b", 2, 4), ("gpipe", 4, 7), ("interleaved1f1b", 2, 8),
                                                ("zbv", 2, 4), ("dualpipev", 3, 13)])
def test_stage_maps_cover_every_layer_once(schedule, pp, layers):
    v = 1 if schedule in ("1f1b", "gpipe") else 2
    pipe = Pipeline(schedule, 2 * pp * v, pp, v, layers)
    owned = sorted(s for r in range(pp) for s in pipe.stages_of(r))
    assert owned == list(range(pipe.stages))
    assert all(len(pipe.stages_of(r)) == v for r in range(pp))
    assert [i for s in range(pipe.stages) for i in pipe.layers_of(s)] == list(range(layers))
    if schedule in ("zbv", "dualpipev"):  # V: rank 0 holds the first and the last stage
        assert pipe.stages_of(0) == [0, pipe.stages - 1]
    else:
        assert pipe.stages_of(0) == list(range(0, pipe.stages, pp))


def test_model_config_arithmetic_and_overrides():
    assert TINY.params() == 853_120
    assert SIZES["8b"].params() == pytest.approx(8.03e9, rel=0.01)  # Llama 3 8B
    assert SIZES["1b"].params() == pytest.approx(1.50e9, rel=0.02)  # Llama 3.2 1B with an untied head
    c = model_config("tiny", layers=8, hidden=256, seq_len=128, batch=4)
    assert (c.layers, c.hidden, c.ffn, c.seq_len, c.batch) == (8, 256, 704, 128, 4)
    with pytest.raises(WorkloadError):
        model_config("70b")
    with pytest.raises(WorkloadError):
        model_config("tiny", hidden=100)  # 8 heads of 12.5


@given(st.builds(RunOptions, workload=st.sampled_from(["dp2", "tp2pp2", "single"]), out=st.just("/tmp/x"),
                 layers=st.none() | st.integers(1, 64), batch=st.none() | st.integers(1, 64),
                 schedule=st.none() | st.sampled_from(SCHEDULES), sp=st.booleans(), ac=st.booleans(),
                 reshard_after_forward=st.none() | st.booleans(), bucket_cap_mb=st.floats(0.01, 1000),
                 device=st.sampled_from(["cpu", "cuda"])))
def test_options_survive_the_trip_through_torchrun_argv(opts):
    assert RunOptions.from_argv(to_argv(opts)) == opts


def test_profile_steps_and_total_steps():
    assert RunOptions("dp2").profile() == (1, 1, 3) and RunOptions("dp2").total_steps() == 8
    assert RunOptions("dp2", profile_steps="4").profile() == (1, 1, 4)
    for bad in ("1,1", "a,b,c", "1,1,0", "-1,1,1"):
        with pytest.raises(WorkloadError):
            RunOptions("dp2", profile_steps=bad).profile()
    with pytest.raises(WorkloadError):
        RunOptions("dp2", steps=4).total_steps()


def test_fault_specs():
    from llmdiag.workloads.faults import parse

    assert parse("rank:1:raise") == (1, "raise", None)
    assert parse("rank:0:hang:5") == (0, "hang", 5)
    assert parse(None) is None
    for bad in ("rank:1", "rank:x:kill", "node:1:kill", "rank:1:explode"):
        with pytest.raises(WorkloadError):
            parse(bad)


@pytest.mark.parametrize("rank", ["1_0", "+1", " 1", "", "12345678", "x"])
def test_both_rank_knobs_refuse_the_same_bad_ranks(rank):
    """One parser (workloads/rankspec.py): a rank int() would read but the grammar does not is refused by both."""
    from llmdiag.workloads import faults, slow

    for parse, spec in ((faults.parse, f"rank:{rank}:raise"), (slow.parse, f"rank:{rank}:2")):
        with pytest.raises(WorkloadError, match="bad"):
            parse(spec)


def test_both_rank_knobs_check_the_world():
    from llmdiag.workloads import faults, slow

    assert faults.parse("rank:1:kill:3", 2) == (1, "kill", 3) and slow.parse("rank:1:2.5:forward", 2) == (1, 2.5, "forward")
    for parse, spec in ((faults.parse, "rank:2:raise"), (slow.parse, "rank:2:2")):
        with pytest.raises(WorkloadError, match="rank 2 is outside the world of 2 ranks"):
            parse(spec, 2)


def test_the_launch_path_does_not_import_torch():
    code = ("import sys; import llmdiag.diagnose.cli.run, llmdiag.workloads.grammar, llmdiag.workloads.options, "
            "llmdiag.workloads.launch, llmdiag.workloads.manifest, llmdiag.workloads.slurm, llmdiag.workloads.faults, "
            "llmdiag.workloads.rankio, llmdiag.workloads.config; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.parametrize("args,needle", [
    (["--workload", "tp0"], "tp size must be >= 1"),
    (["--workload", "tp3"], "not divisible by 3"),
    (["--workload", "pp8"], "pipeline stages"),
    (["--workload", "tp4", "--nproc-per-node", "2"], "needs 4 ranks but 2 are available"),
    (["--workload", "dp2", "--inject-fault", "rank:1"], "bad fault spec"),
    (["--workload", "pp2", "--inject-slow", "rank:1:0.5"], "bad --inject-slow spec"),
    (["--workload", "pp2", "--inject-slow", "rank:1:2:optimizer"], "bad --inject-slow spec"),
    (["--workload", "dp2", "--nnodes", "2"], "--rdzv-endpoint"),
    (["--workload", "ep2", "--moe-experts", "3"], "3 experts are not divisible by 2"),
    (["--workload", "ep2", "--moe-experts", "2", "--moe-topk", "3"], "--moe-topk 3 is more than --moe-experts 2"),
    (["--workload", "dp2", "--moe-route-skew", "0.5"], "need --moe-experts"),
    (["--workload", "dp2", "--grad-accum", "2", "--accum-keep-gathered"], "needs fsdpN and --grad-accum >= 2"),
])
def test_cli_rejects_bad_input_with_exit_2_before_any_process(tmp_path, args, needle):
    out = tmp_path / "run"
    code = ("import sys; from llmdiag.diagnose.cli.run import run\n"
            "try:\n    run(sys.argv[1:], standalone_mode=False)\n"
            "except Exception as e:\n    assert 'torch' not in sys.modules\n    print(e.line(), file=sys.stderr)\n"
            "    sys.exit(2)\n")
    proc = subprocess.run([sys.executable, "-c", code, *args, "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and not out.exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to check the script's syntax")
@pytest.mark.parametrize("args,nodes,per_node", [(["--workload", "dp2tp4pp2"], 2, 8),
                                                 (["--workload", "dp2", "--nproc-per-node", "1"], 2, 1),
                                                 (["--workload", "tp2"], 1, 2)])
def test_print_slurm_writes_a_valid_multi_node_script(tmp_path, args, nodes, per_node):
    proc = subprocess.run([sys.executable, "-c", "from llmdiag.diagnose.cli.run import run; run()", *args, "--print-slurm"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert f"#SBATCH --nodes={nodes}" in script and f"--nproc-per-node {per_node} --nnodes {nodes}" in script
    assert "--node-rank \\$SLURM_NODEID" in script
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_print_slurm_refuses_nodes_that_do_not_divide_the_world():
    """12 ranks on nodes of 8 would start 16 ranks, and every node's plan would refuse them: say so at once."""
    proc = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "run", "--workload", "dp3tp4", "--nproc-per-node",
                           "8", "--print-slurm"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert "12 ranks" in line and "nodes of 8" in line and "Traceback" not in proc.stderr
