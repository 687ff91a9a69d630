"""Every parallel layout trains the same model to the same losses as one process, and writes a valid run folder.

Slow tests start the real CLI (torchrun, gloo, CPU) once per layout with the tiny model and 3 steps
(profile 0,1,1: step 1 profiled, step 2 not), and compare each rank's losses with a single-process reference
computed here. Fast tests check the pieces in-process: model shape, data slicing, ring attention maths.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from datetime import timedelta
from itertools import product

import pytest
import torch

from llmdiag.workloads.config import SIZES, model_config
from llmdiag.workloads.data import global_batch, local_batch
from llmdiag.workloads.grammar import parse_workload
from llmdiag.workloads.model import reference_model
from llmdiag.workloads.options import RunOptions
from llmdiag.workloads.reference import reference_losses

STEPS = ["--profile-steps", "0,1,1", "--steps", "3"]
# (id, workload, extra args). tp4pp2 is the 8-process case; the rest cover every parallelism, every schedule,
# and the compositions that take a different code path (replicate under TP, flattened dp/fsdp x cp meshes, SP, AC).
LAYOUTS = [
    ("dp2", "dp2", []),
    ("fsdp2", "fsdp2", []),
    ("tp2", "tp2", []),
    ("cp2", "cp2", []),
    ("pp2-1f1b", "pp2", ["--schedule", "1f1b"]),
    ("pp2-gpipe", "pp2", ["--schedule", "gpipe"]),
    ("pp2-interleaved1f1b", "pp2", ["--schedule", "interleaved1f1b"]),
    ("pp2-zbv", "pp2", ["--schedule", "zbv"]),
    ("pp2-dualpipev", "pp2", ["--schedule", "dualpipev"]),
    ("tp2pp2", "tp2pp2", []),
    ("tp4pp2", "tp4pp2", []),
    ("fsdp2tp2-sp-ac", "fsdp2tp2", ["--sp", "--ac"]),
    ("dp2cp2", "dp2cp2", []),
]
# What the manifest must hold: docs/run-folder.md, exactly.
MANIFEST_KEYS = {
    "schema_version", "workload", "layout", "world_size", "mesh_dim_names", "ranks", "pipeline", "model", "batch",
    "tokens_per_step", "model_flops_per_step", "backend", "device", "dtype", "torch_version", "llmdiag_version",
    "profiler", "steps", "options", "command", "cpu_cores", "oversubscribed", "rank_status", "status",
    "started_at", "finished_at", "launch", "failure",
}
_PP_LABEL = re.compile(r"^PP:(\d+)([FIBW])(\d+)$")
_PP_OVERLAP = re.compile(r"(\d+)([FIBW])(\d+)")


def _opts(workload: str, args: list[str]) -> RunOptions:
    return RunOptions.from_argv(["--workload", workload, "--out", "-", *STEPS, *args])


def _trace(out: str, rank: int) -> dict:
    with gzip.open(os.path.join(out, "traces", f"rank{rank}.pt.trace.json.gz")) as f:
        return json.load(f)


def _labels(trace: dict) -> list[str]:
    return [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, llmdiag_run):
    """Run each layout at most once per module; returns its run folder and the CLI's output."""
    base = tmp_path_factory.mktemp("layouts")
    done: dict[str, tuple[str, object]] = {}

    def get(key: str):
        if key not in done:
            _, workload, args = next(x for x in LAYOUTS if x[0] == key)
            out = str(base / key)
            done[key] = (out, llmdiag_run(out, workload, *STEPS, *args))
        return done[key]

    return get


# -- fast, in-process --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["tiny", "125m"])
def test_model_matches_the_config_arithmetic(size):
    cfg = model_config(size, layers=2) if size != "tiny" else SIZES["tiny"]
    from llmdiag.workloads.model import build

    model = build(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.params()
    assert list(model.layers.keys()) == [str(i) for i in range(cfg.layers)]
    stage = build(cfg, [1], first=False, last=True)
    assert list(stage.layers.keys()) == ["1"] and stage.tok_embeddings is None and stage.output is not None


def test_weights_do_not_depend_on_what_a_rank_holds():
    from llmdiag.workloads.model import build, materialize

    cfg = SIZES["tiny"]
    full = reference_model(cfg, seed=3)
    stage = build(cfg, [2, 3], first=False, last=True)
    for prefix, piece in stage.pieces():
        materialize(piece, prefix, cfg, torch.device("cpu"), torch.float32, seed=3)
    full_params = dict(full.named_parameters())
    for name, p in stage.named_parameters():
        assert torch.equal(p, full_params[name]), name


def test_data_slices_reassemble_the_global_batch():
    tokens = global_batch(5, 8, 16, 256, seed=1)
    assert torch.equal(tokens, global_batch(5, 8, 16, 256, seed=1))
    assert not torch.equal(tokens, global_batch(6, 8, 16, 256, seed=1))
    rows = []
    for replica in range(2):
        cols = [local_batch(5, batch=8, seq_len=16, vocab=256, seed=1, replica=replica, replicas=2, cp_rank=c, cp=2)
                for c in range(2)]
        rows.append((torch.cat([c[0] for c in cols], 1), torch.cat([c[1] for c in cols], 1)))
    inputs, targets = torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])
    assert torch.equal(inputs, tokens[:, :-1]) and torch.equal(targets, tokens[:, 1:])


def test_ring_attention_maths_on_one_rank_matches_sdpa(tmp_path):
    """cp=1 ring = the causal diagonal block: checks the log-sum-exp forward and the hand-written backward."""
    import torch.distributed as dist
    import torch.nn.functional as F

    from llmdiag.workloads.parallel.cp import ring_attention

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=60))
    try:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
        dout = torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64)
        out = ring_attention(q, k, v, dist.group.WORLD)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
        torch.testing.assert_close(out, ref)
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r)
    finally:
        dist.destroy_process_group()


# -- slow: the real CLI, torchrun, gloo -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("key", [x[0] for x in LAYOUTS])
def test_layout_trains_like_one_process(runs, key):
    _, workload, args = next(x for x in LAYOUTS if x[0] == key)
    out, proc = runs(key)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    world = parse_workload(workload).world_size
    assert manifest["status"] == "ok" and manifest["world_size"] == world
    expected = reference_losses(_opts(workload, args), 3)
    for r in range(world):
        st = manifest["rank_status"][str(r)]
        assert st["status"] == "ok" and st["exit_code"] == 0
        assert st["losses"] == pytest.approx(expected, rel=2e-5), f"rank {r}"
        assert st["profiled_step_ms"] > 0 and st["unprofiled_step_ms"] > 0
    assert expected[-1] < expected[0]  # it learns
    assert "step 3/3" in proc.stdout


@pytest.mark.slow
def test_run_folder_contract(runs):
    """tp2pp2: manifest keys, one complete gzipped trace per rank, coordinates that match the trace's groups."""
    out, _ = runs("tp2pp2")
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    assert set(m) == MANIFEST_KEYS
    assert m["layout"] == {"dp": 1, "fsdp": 1, "tp": 2, "pp": 2, "cp": 1} and m["mesh_dim_names"] == ["pp", "tp"]
    assert m["pipeline"] == {"schedule": "1f1b", "microbatches": 4, "stages": 2, "stages_per_rank": 1, "pp": 2}
    assert m["backend"] == "gloo" and m["dtype"] == "float32" and m["device"]["type"] == "cpu"
    assert m["profiler"] == {"wait": 0, "warmup": 1, "active": 1, "record_shapes": True, "profile_memory": True,
                             "with_stack": False}
    assert m["oversubscribed"] == (4 > (os.cpu_count() or 1)) and m["steps"] == 3
    assert m["tokens_per_step"] == 8 * 64 and m["model_flops_per_step"] > 6 * m["model"]["params"] * 0.9 * 512
    assert sorted(os.listdir(os.path.join(out, "traces"))) == [f"rank{r}.pt.trace.json.gz" for r in range(4)]
    for r in range(4):
        coords = m["ranks"][str(r)]
        trace = _trace(out, r)
        info = trace["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (r, 4, "gloo")
        assert trace["traceName"].endswith(f"rank{r}.pt.trace.json.gz")
        groups = {g["pg_desc"]: sorted(g["ranks"]) for g in info["pg_config"]}
        for dim in m["mesh_dim_names"]:  # the ranks sharing every other coordinate form this rank's dim group
            peers = sorted(int(q) for q, c in m["ranks"].items()
                           if all(c[d] == coords[d] for d in m["mesh_dim_names"] if d != dim))
            assert groups[f"mesh_{dim}"] == peers, (r, dim)
        assert coords["stages"] == [coords["pp"]] and m["rank_status"][str(r)]["trace"] == \
            f"traces/rank{r}.pt.trace.json.gz"
        labels = _labels(trace)
        assert labels.count("ProfilerStep#1") == 1 and "llmdiag/optimizer" in labels
        s = coords["pp"]
        assert {x for x in labels if x.startswith("PP:")} == {f"PP:{s}{k}{mb}" for k in "FB" for mb in range(4)}
        assert os.path.getsize(os.path.join(out, "logs", f"rank{r}.log")) > 0
        with open(os.path.join(out, "results", f"rank{r}.json")) as f:
            assert json.load(f)["status"] == "ok"


@pytest.mark.slow
def test_non_pipeline_runs_label_their_phases(runs):
    out, _ = runs("fsdp2")
    for r in range(2):
        labels = _labels(_trace(out, r))
        for phase in ("llmdiag/forward", "llmdiag/backward", "llmdiag/optimizer"):
            assert labels.count(phase) == 1, (r, phase)
        assert any(x.startswith("gloo:all_gather") for x in labels)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["pp2-1f1b", "pp2-gpipe", "pp2-interleaved1f1b", "pp2-zbv", "pp2-dualpipev"])
def test_every_schedule_labels_every_stage_and_microbatch(runs, key):
    """One profiled step: each local stage shows a forward and a backward (B, or I then W) for every microbatch,
    in torch's `PP:{stage}{action}{mb}` form (dualpipev also nests pairs in `PP:(..;..)OVERLAP_F_B`)."""
    out, _ = runs(key)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    mbs = range(m["pipeline"]["microbatches"])
    for r in range(2):
        seen = set()
        for name in _labels(_trace(out, r)):
            if match := _PP_LABEL.match(name):
                seen.add((int(match[1]), match[2], int(match[3])))
            elif name.endswith("OVERLAP_F_B"):
                seen |= {(int(a), b, int(c)) for a, b, c in _PP_OVERLAP.findall(name)}
        for stage, mb in product(m["ranks"][str(r)]["stages"], mbs):
            assert (stage, "F", mb) in seen, (key, r, stage, mb)
            assert (stage, "B", mb) in seen or {(stage, "I", mb), (stage, "W", mb)} <= seen, (key, r, stage, mb)
