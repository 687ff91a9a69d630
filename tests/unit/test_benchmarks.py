"""The benchmark generator writes valid, realistic Kineto traces that the analyzer reads; the runner's
plumbing works. Light and fast: no timing assertions (those numbers live in docs/benchmarks.md)."""

from __future__ import annotations

import gzip
import os
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
