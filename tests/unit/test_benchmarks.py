"""The benchmark generator writes valid, realistic Kineto traces that the analyzer reads; the runner's
plumbing works. Light and fast: no timing assertions (those numbers live in docs/benchmarks.md)."""

from __future__ import annotations

import gzip
import os
import sys
from collections import Counter

import orjson
import pytest

from benchmarks import generate
from benchmarks.proctree import run_sampled, tree
from benchmarks.run import Case, cases_for, table
from llmdiag.diagnose.analyze import analyze_path


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench") / "r2"
    return str(d), generate.write_set(str(d), ranks=2, mb=0.4, steps=3, jobs=1)


def test_generated_traces_are_kineto_json(small_set):
    d, paths = small_set
    assert [os.path.basename(p) for p in paths] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    doc = orjson.loads(gzip.decompress(open(paths[1], "rb").read()))
    dist = doc["distributedInfo"]
    assert dist["rank"] == 1 and dist["world_size"] == 2
    assert {g["pg_desc"] for g in dist["pg_config"]} == {"default_pg", "mesh_dp", "mesh_tp"}
    assert doc["deviceProperties"][0]["totalGlobalMem"] > 0
    ev = doc["traceEvents"]
    kinds = Counter((e["ph"], e.get("cat")) for e in ev)
    for k in [("X", "cpu_op"), ("X", "cuda_runtime"), ("X", "kernel"), ("X", "gpu_memcpy"), ("X", "gpu_memset"),
              ("X", "user_annotation"), ("s", "ac2g"), ("f", "ac2g"), ("i", "cpu_instant_event"), ("M", None)]:
        assert kinds[k] > 0, k
    steps = [e["name"] for e in ev if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 3
    nccl = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith(("ncclDevKernel_", "ncclKernel_"))]
    assert {e["name"].split("_")[0] for e in nccl} == {"ncclDevKernel", "ncclKernel"}
    for e in nccl:
        a = e["args"]
        assert {"Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "Process Group Name",
                "Process Group Description", "stream", "correlation"} <= set(a)
    mem = [e for e in ev if e["name"] == "[memory]"]
    assert all({"Total Allocated", "Total Reserved", "Device Type"} <= set(e["args"]) for e in mem)
    assert all(e["args"]["Device Type"] == 1 for e in mem)
    # every kernel has its launch: same correlation on a cuda_runtime event
    launches = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"}
    assert all(e["args"]["correlation"] in launches for e in ev if e.get("cat") in ("kernel", "gpu_memcpy"))


def test_generated_set_is_reused_and_sized(small_set):
    d, paths = small_set
    spec = orjson.loads(open(os.path.join(d, "generated.spec"), "rb").read())
    assert all(0.5 * 0.4e6 < n < 2 * 0.4e6 for n in spec["decompressed_bytes"])
    mtime = os.path.getmtime(paths[0])
    assert generate.write_set(d, ranks=2, mb=0.4, steps=3, jobs=1) == paths
    assert os.path.getmtime(paths[0]) == mtime


def test_analyzer_reads_the_generated_set(small_set):
    d, _ = small_set
    a = analyze_path(d, rules=False, exclude_last_step=True, jobs=1)
    assert [m.rank for m in a.ranks] == [0, 1]
    assert not [i for i in a.issues if i.severity == "error"]
    assert a.layout["tp"] == 2
    for m in a.ranks:
        assert m.trace_kind == "gpu" and len(m.steps) == 2
        assert 0 < m.overlap_ratio < 1
        assert {c.kind for c in m.comm_by_kind} >= {"allreduce", "allgather", "reducescatter"}
        assert all(c.busbw_gbps and c.busbw_gbps > 0 for c in m.comm_by_kind if c.kind != "allreduce" or c.bytes > 8)
        assert m.memory and m.memory[0].peak_allocated > m.memory[0].capacity * 0.3
    assert a.skew is not None


def test_runner_plumbing(tmp_path):
    cases = cases_for("quick", str(tmp_path / "no-real-fixtures"))
    assert {c.kind for c in cases} == {"set", "scaling", "render", "imports"}
    row = {"case": "r1", "kind": "set", "ranks": 1, "bytes": 2e6, "largest": 2e6,
           "llmdiag": {"wall": 1.0, "cpu": 1.5, "peak_pss": 3e6, "overlap_pct": 10.0},
           "orjson": {"wall": 0.5, "cpu": 0.5}, "hta": {"error": "not run"}}
    out = table([row, {"case": "render:4", "kind": "render", "ranks": 4, "note": "skipped"}], {"inline": 1e6})
    assert "| r1 | 1 | 2 | 1.00 | 2 |" in out and "skipped" in out
    assert Case("x", "set").files == []
    assert os.getpid() in tree(os.getpid())
    done, mem = run_sampled(["python3", "-c", "x = bytearray(30 << 20); import time; time.sleep(0.3)"])
    assert done.returncode == 0 and mem["peak_rss"] > 20 << 20


def test_import_cost_reads_importtime_and_runs_the_command(tmp_path):
    """The figure is the sum of the self times `-X importtime` prints, one line per module; one real pair of runs
    (the analyze command line on a generated rank, then numpy) comes back as numbers (none asserted)."""
    from benchmarks import import_cost

    err = ("import time: self [us] | cumulative | imported package\n"
           "import time:       120 |        120 |   _io\n"
           "import time:      3000 |       4000 | numpy\nsummary: x.json\n")
    assert import_cost.parse(err) == {"_io": 120, "numpy": 3000}
    assert import_cost.parse(err, cumulative=True) == {"_io": 120, "numpy": 4000}
    assert import_cost._group("llmdiag.diagnose.metrics.rank.kernels") == "llmdiag.diagnose.metrics.rank"
    assert import_cost._group("llmdiag.diagnose.model.analysis") == "llmdiag.diagnose.model"
    assert import_cost._group("numpy._core.umath") == "numpy"
    one = generate.write_set(str(tmp_path / "one"), ranks=1, mb=0.05, steps=2, jobs=1)[0]
    m = import_cost.measure(one, repeats=1)
    assert m["modules"] > 100 and "numpy" in m["heaviest"] and m["analyze_s"] > m["numpy_line_s"] > 0
    assert m["numpy_alone_s"] > 0
    assert "analyze imports, 1 rank" in import_cost.line(m) and "over its numpy line" in import_cost.line(m)


def _fake_real(root, src: str):
    """A stand-in for ../shared/fixtures/real: a generated trace under two of HTA's names."""
    import shutil

    (root / "hta" / "sampled_pair").mkdir(parents=True)
    shutil.copy(src, root / "hta" / "nccl_data.json.gz")
    shutil.copy(src, root / "hta" / "sampled_pair" / "sampled_rank-0.json.gz")
    return root


def test_whole_command_ratio_is_paired_rounds(tmp_path, monkeypatch, small_set):
    """The ratio of a round is the baseline's seconds over llmdiag's summed over the cases (= llmdiag's rate over
    the baseline's on the same bytes); the figure is the median over rounds, not a ratio of medians."""
    from benchmarks import whole_command

    real = _fake_real(tmp_path / "real", small_set[1][0])
    assert [n for n, _, _ in whole_command.cases(str(real))] == ["sampled_pair", "nccl_data"]
    llm = iter([1.0, 1.0,  1.0, 1.0,  2.0, 2.0,  4.0, 4.0,  4.0, 4.0,  4.0, 4.0])  # warm-up pair, then 5 rounds
    base = iter([1.0, 1.0,  1.0, 1.0,  1.0, 1.0,  1.0, 1.0,  2.0, 2.0,  8.0, 8.0])
    monkeypatch.setattr(whole_command, "timed", lambda argv, env=None, cwd=None: (lambda x: (x, x / 2))(
        next(llm) if "llmdiag.diagnose.cli.main" in argv else next(base)))
    m = whole_command.measure(str(real), repeats=5)
    # rounds (llmdiag, baseline) summed over the 2 cases: (2, 2), (4, 2), (8, 2), (8, 4), (8, 16)
    assert m["ratio_wall"] == 0.5 and m["ratio_cpu"] == 0.5
    assert [r["llmdiag_wall"] for r in m["rounds"]] == [2, 4, 8, 8, 8]
    assert m["cases"]["nccl_data"]["llmdiag_wall"] == 4.0 and m["mb"] > 0
    assert "rate ratio (median of 5 paired rounds) wall 0.50, cpu 0.50 (target >= 0.9: NOT met)" in whole_command.line(m)


def test_whole_command_runs_the_real_command_and_the_baseline(tmp_path, small_set):
    from benchmarks import whole_command

    real = _fake_real(tmp_path / "real", small_set[1][0])
    m = whole_command.measure(str(real), repeats=1, names=["nccl_data"])
    c = m["cases"]["nccl_data"]
    assert c["llmdiag_wall"] > 0 and c["baseline_wall"] > 0 and c["llmdiag_cpu"] > 0 and m["report"]
    with pytest.raises(RuntimeError, match="no real fixtures"):
        whole_command.measure(str(tmp_path / "none"), repeats=1)
    with pytest.raises(RuntimeError):  # a failing command is an error, not a fast run
        whole_command.timed([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", str(tmp_path / "missing")])


def test_bench_has_the_whole_command_and_the_real_report_cost(tmp_path, small_set):
    real = _fake_real(tmp_path / "real", small_set[1][0])
    (real / "hta" / "trace_diff").mkdir()
    (real / "hta" / "trace_diff" / "control.json.gz").write_bytes(b"")
    kinds = {c.name: c for c in cases_for("default", str(real))}
    assert kinds["whole:real"].kind == "whole" and kinds["whole:real"].path == str(real)
    assert kinds["render_cost:real"].path.endswith("control.json.gz")
    assert "render_cost:real" not in {c.name for c in cases_for("quick", str(real))}
    m = {"without_s": 1.0, "with_s": 1.05, "ratio": 1.05, "without_cpu": 0.8, "with_cpu": 0.9, "ratio_cpu": 1.125,
         "target": 1.10, "report_bytes": 2e5, "load": 1.0}
    from benchmarks import render_cost

    assert "ratio 1.05 wall, 1.12 cpu" in render_cost.line(m, 35) and "met / NOT met" in render_cost.line(m, 35)


def test_whole_command_against_another_tree_shares_the_rounds(tmp_path, monkeypatch, small_set):
    """`--against TREE`: a third side in every round, told apart here by its PYTHONPATH; its ratio is the
    baseline over it, as for the tree under test."""
    from benchmarks import whole_command

    real = _fake_real(tmp_path / "real", small_set[1][0])
    old = str(tmp_path / "old")
    seen = []

    def fake(argv, env=None, cwd=None):
        assert cwd and not os.path.exists(os.path.join(cwd, "llmdiag"))  # `python -m` would import cwd's tree first
        side = "base" if "-c" in argv else "old" if env["PYTHONPATH"].startswith(old) else "new"
        seen.append(side)
        return {"base": (1.0, 1.0), "new": (2.0, 2.0), "old": (4.0, 4.0)}[side]

    monkeypatch.setattr(whole_command, "timed", fake)
    m = whole_command.measure(str(real), repeats=3, against=old)
    assert seen.count("old") == seen.count("new") == seen.count("base") == 2 * 4  # 2 cases x (warm-up + 3 rounds)
    assert m["ratio_cpu"] == 0.5 and m["against_ratio_cpu"] == 0.25 and m["cases"]["nccl_data"]["against_cpu"] == 4.0
    assert f"against {old}" in whole_command.line(m)


def test_whole_phases_times_every_phase_of_the_real_command(tmp_path, small_set):
    """benchmarks.whole_phases wraps the command's own functions: a renamed one fails here, not silently."""
    from benchmarks import whole_phases

    real = _fake_real(tmp_path / "real", small_set[1][0])
    res = whole_phases.measure(repeats=1, names=["nccl_data"], real_dir=str(real))
    p = res["nccl_data"]
    for k in ("import numpy", "parse + per-rank metrics", "cross-rank assembly", "rules", "summary bytes",
              "summary write", "report context", "report render (context included)", "report write"):
        assert p[k] > 0, k
    assert p["in-process total"] >= p["the command after its imports"] >= p["parse + per-rank metrics"]
    assert res["interpreter"] > 0 and "| parse + per-rank metrics |" in whole_phases.table(res)
    with pytest.raises(RuntimeError):
        whole_phases.phases(str(tmp_path / "missing"), True, dict(os.environ), str(tmp_path))
