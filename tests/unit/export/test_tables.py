"""`analyze --tables DIR`: the Parquet tables hold the Analysis' own numbers (and, on generated traces, the
hand-computed answers), round-trip through pyarrow (duckdb and polars where installed), keep hostile strings
intact, and a missing pyarrow is one line and exit 2 before any work."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.export import tables as tb
from tests.gen import pipeline as gen_pipeline
from tests.gen.builder import TraceBuilder, gpu_rank
from tests.gen.moe import moe_ep_ranks
approx = pytest.approx
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SAMPLED = os.path.join(ROOT, "..", "shared", "fixtures", "real", "hta", "sampled_pair")


def _skewed(rank: int, world: int = 4) -> TraceBuilder:
    """gpu_rank's step (600 µs GEMM, 300 µs all-reduce of which 100 overlap), with rank r's all-reduce starting
    10·r µs later and ending 10·r µs later, and a memory peak of (r + 1) MiB: exposed comm 200 µs per step on
    every rank; arrival skew 10·(world − 1) µs at every all-reduce, rank world − 1 last."""
    b = TraceBuilder(rank=rank, world_size=world)
    for k in range(1, 4):
        k0 = (k - 1) * 1000
        b.step(k, k0, k0 + 1000)
        b.kernel("void gemm_kernel<float>()", k0 + 100, 600, stream=7, launch_at=k0 + 10)
        b.nccl("allreduce", k0 + 600 + 10 * rank, 300, stream=20, launch_at=k0 + 11, nelems=1 << 20,
               group_size=world, pg_ranks=list(range(world)))
        b.memory(k0 + 50, (rank + 1) << 20, 2 << 20, nbytes=1)
        b.memory(k0 + 950, 0, 2 << 20, nbytes=-1)
    return b


def _write(tmp_path, builders, name="run"):
    d = tmp_path / name
    for b in builders:
        b.write(d / f"rank{b.rank}.pt.trace.json")
    return str(d)


def _read(folder) -> dict:
    return {f[:-8]: pq.read_table(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".parquet")}


def _rows(t) -> list[dict]:
    return t.to_pylist()


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("skewed")
    a = analyze_path(_write(tmp, [_skewed(r) for r in range(4)]), jobs=1)
    out = str(tmp / "tables")
    tb.write_tables(a, out)
    return a, _read(out)


def test_generated_ranks_match_the_hand_computed_answer(skewed):
    a, t = skewed
    steps = _rows(t["steps"])
    assert len(steps) == 4 * 3 and [r["rank"] for r in steps] == sorted(r["rank"] for r in steps)
    for row in steps:  # independent of llmdiag: the placed kernels
        assert row["comm_ms"] == approx(0.3) and row["overlapped_comm_ms"] == approx(0.1 - 0.01 * row["rank"])
        assert row["exposed_comm_ms"] == approx(0.2 + 0.01 * row["rank"])
        assert row["compute_ms"] == approx(0.6)
        parts = sum(row[k] for k in ("compute_only_ms", "overlapped_comm_ms", "exposed_comm_ms", "other_ms", "idle_ms"))
        assert parts == approx(row["step_ms"])
    mem = {r["rank"]: r for r in _rows(t["memory"])}
    assert {r: m["peak_allocated_bytes"] for r, m in mem.items()} == {r: (r + 1) << 20 for r in range(4)}
    assert all(m["peak_reserved_bytes"] == 2 << 20 for m in mem.values())
    coll = _rows(t["collectives"])
    assert len(coll) == 1 and coll[0]["kind"] == "allreduce" and coll[0]["matched"] == 3
    assert coll[0]["mean_skew_ms"] == approx(0.03) and coll[0]["max_skew_ms"] == approx(0.03)
    ranks = {r["rank"]: r for r in _rows(t["ranks"])}
    assert ranks[3]["last_arrivals"] == 3 and all(ranks[r]["last_arrivals"] == 0 for r in range(3))
    assert ranks[0]["wait_ms"] == approx(3 * 0.03)  # 30 µs behind rank 3 at each of 3 all-reduces
    late = _rows(t["late_arrivals"])
    assert late and all(x["late"] == (x["rank"] == 3) for x in late)
    assert all(x["late_ms"] == approx(0.03) for x in late if x["late"])
    assert {(x["rank"], x["in_nelems"]) for x in late} >= {(r, 1 << 20) for r in range(4)}


def test_every_table_equals_the_summary(skewed):
    a, t = skewed
    s = a.to_dict()
    for r, row in zip(s["ranks"], _rows(t["ranks"])):
        assert row["rank"] == r["rank"] and row["file"] == r["file"] and row["steps"] == len(r["steps"])
        for col, key in [("step_ms", "step_time_ms"), ("compute_ms", "compute_ms"), ("comm_ms", "comm_ms"),
                         ("exposed_comm_ms", "exposed_comm_ms"), ("idle_ms", "idle_ms"), ("other_ms", "other_ms"),
                         ("overlap_ratio", "overlap_ratio"), ("exposed_comm_frac", "exposed_comm_frac"),
                         ("idle_frac", "idle_frac"), ("kernel_time_ms", "kernel_time_ms")]:
            assert row[col] == r[key], col
    steps = [(r["rank"], st) for r in s["ranks"] for st in r["steps"]]
    for (rank, st), row in zip(steps, _rows(t["steps"]), strict=True):
        assert row["rank"] == rank and row["step"] == st["step"] and row["step_ms"] == st["time_ms"]
        assert all(row[k] == st[k] for k in ("start_ms", "compute_ms", "comm_ms", "overlapped_comm_ms",
                                             "exposed_comm_ms", "compute_only_ms", "other_ms", "idle_ms",
                                             "overlap_ratio"))
    comm = [{"rank": r["rank"], **c} for r in s["ranks"] for c in r["comm_by_kind"]]
    for c, row in zip(comm, _rows(t["comm"]), strict=True):
        assert {k: row[k] for k in row} == {k: c[k] for k in row}
    kern = [{"rank": r["rank"], **k} for r in s["ranks"] for k in r["top_kernels"]]
    for k, row in zip(kern, _rows(t["kernels"]), strict=True):
        assert row == {c: k[c] for c in row}
    mem = [(r["rank"], m) for r in s["ranks"] for m in r["memory"]]
    for (rank, m), row in zip(mem, _rows(t["memory"]), strict=True):
        assert (row["rank"], row["device"], row["peak_allocated_bytes"], row["peak_reserved_bytes"], row["peak_ms"],
                row["peak_op"], row["capacity_bytes"]) == (rank, m["device"], m["peak_allocated"], m["peak_reserved"],
                                                           m["peak_ms"], m["peak_op"], m["capacity"])
    points = [(r["rank"], m["device"], *p) for r in s["ranks"] for m in r["memory"] for p in m["timeline"]]
    assert points and [tuple(x.values()) for x in _rows(t["memory_timeline"])] == points
    assert _rows(t["collectives"]) == [{k: c[k] for k in _rows(t["collectives"])[0]} for c in s["skew"]["by_collective"]]
    late_rows = sum(len(set(x["late_ranks"]) | {int(k) for k in x["in_nelems"]}) for x in s["skew"]["late"])
    assert t["late_arrivals"].num_rows == late_rows
    assert not {"p2p", "pipeline_stages", "pipeline_actions", "moe_ranks", "moe_layers"} & set(t)


@pytest.mark.real
def test_real_fixture_through_the_cli(tmp_path):
    """sampled_pair (2 real ranks): the tables the CLI writes hold the numbers of the summary it writes."""
    assert os.path.isdir(SAMPLED), f"the shared real fixtures stand beside every checkout CI runs: {SAMPLED}"
    out, js = tmp_path / "tables", tmp_path / "s.json"
    res = CliRunner().invoke(main, ["analyze", SAMPLED, "--no-report", "-q", "--json", str(js), "--tables", str(out)])
    assert res.exit_code == 0, res.output
    assert f"tables:  {out} (" in res.output
    import json

    s = json.loads(js.read_text())
    t = _read(out)
    ranks = _rows(t["ranks"])
    assert [r["rank"] for r in ranks] == [0, 1]
    for r, row in zip(s["ranks"], ranks):
        assert (row["step_ms"], row["overlap_ratio"], row["exposed_comm_ms"], row["idle_frac"]) == \
               (r["step_time_ms"], r["overlap_ratio"], r["exposed_comm_ms"], r["idle_frac"])
        mine = [x for x in _rows(t["steps"]) if x["rank"] == r["rank"]]
        assert [x["step_ms"] for x in mine] == [st["time_ms"] for st in r["steps"]]
        assert [(k["name"], k["total_ms"]) for k in _rows(t["kernels"]) if k["rank"] == r["rank"]] == \
               [(k["name"], k["total_ms"]) for k in r["top_kernels"]]
        assert sum(c["count"] for c in _rows(t["comm"]) if c["rank"] == r["rank"]) == \
               sum(c["count"] for c in r["comm_by_kind"])
    assert {(x["pg"], x["kind"], x["matched"]) for x in _rows(t["collectives"])} == \
           {(c["pg"], c["kind"], c["matched"]) for c in s["skew"]["by_collective"]}
    assert {(x["kind"], x["ordinal"], x["rank"], x["late_ms"]) for x in _rows(t["late_arrivals"]) if x["late"]} == \
           {(x["kind"], x["ordinal"], r, ms) for x in s["skew"]["late"] for r, ms in zip(x["late_ranks"], x["late_ms"])}


def test_schema_and_metadata_round_trip(skewed, tmp_path):
    a, t = skewed
    for name, table in t.items():
        spec = tb.TABLES[name][1]
        assert table.column_names == [c for c, _, _ in spec]
        meta = table.schema.metadata
        assert meta[b"llmdiag.version"] == a.llmdiag_version.encode() and meta[b"llmdiag.table"] == name.encode()
        assert int(meta[b"llmdiag.tables_schema"]) == tb.TABLES_SCHEMA_VERSION
        for f, (_, typ, doc) in zip(table.schema, spec):
            assert f.metadata[b"doc"] == doc.encode()
            assert str(f.type) == {"i64": "int64", "f64": "double", "str": "large_string", "bool": "bool"}[typ]
        for col, typ, _ in spec:  # a number's unit is in its name, or it is a ratio
            assert typ != "f64" or col.endswith(("_ms", "_us", "_gbps", "_frac", "_ratio", "_tflops", "_gflop", "_gb", "_per_step", "_per_byte", "_events")) or col in RATIOS, col


RATIOS = {"share", "bubble", "bubble_replay", "bubble_theory", "bubble_gap", "imbalance"}


def test_duckdb_and_polars_read_them(skewed, tmp_path):
    a, _ = skewed
    out = tmp_path / "t"
    tb.write_tables(a, str(out))
    import duckdb
    got = duckdb.sql(f"select rank, sum(exposed_comm_ms) from '{out}/steps.parquet' group by rank order by rank").fetchall()
    assert got == [(r.rank, approx(sum(s.exposed_comm_ms for s in r.steps))) for r in a.ranks]
    import polars as pl
    df = pl.read_parquet(out / "kernels.parquet")
    assert df.height == sum(len(r.top_kernels) for r in a.ranks)
    assert df.filter(pl.col("rank") == 0)["total_ms"].to_list() == [k.total_ms for k in a.ranks[0].top_kernels]


def test_hostile_strings_survive(tmp_path):
    long = "void k<" + "x" * 20_000 + ">()"
    odd = ['gemm"quoted\'"', "two\nlines\r\n\t", long, "\u202e\x1b[31mred", "名前 ∑"]
    builders = []
    for r in range(2):
        b = gpu_rank(r, world_size=2)
        for i, name in enumerate(odd):
            b.kernel(name, 700 + 10 * i, 5, stream=7, launch_at=20)
        builders.append(b)
    a = analyze_path(_write(tmp_path, builders), jobs=1, top_k=50)
    tb.write_tables(a, str(tmp_path / "t"))
    names = {k["name"] for k in _rows(pq.read_table(tmp_path / "t" / "kernels.parquet"))}
    assert set(odd) <= names
    a.ranks[0].file = "bad\udcffname.json"  # a non-UTF-8 file name (surrogate escape): made valid, not a crash
    tb.write_tables(a, str(tmp_path / "t2"))
    assert _rows(pq.read_table(tmp_path / "t2" / "ranks.parquet"))[0]["file"] == "bad\ufffdname.json"


def test_int_beyond_int64_is_null_not_wrapped():
    arr = tb._array(pa, [1, 2**70, -(2**70), None, 2**63 - 1], pa.int64(), "i64")
    assert arr.to_pylist() == [1, None, None, None, 2**63 - 1]


def test_pipeline_and_moe_tables(tmp_path):
    case = gen_pipeline.Case(p=2, m=4)
    d = tmp_path / "pp"
    gen_pipeline.write(case, d)
    a = analyze_path(str(d), jobs=1)
    assert a.pipeline is not None
    tb.write_tables(a, str(tmp_path / "pt"))
    st = _rows(pq.read_table(tmp_path / "pt" / "pipeline_stages.parquet"))
    assert [(x["stage"], x["rank"], x["bubble"], x["bubble_theory"], x["busy_ms"]) for x in st] == \
           [(s.stage, s.rank, s.measured, s.theory, s.busy_ms) for s in a.pipeline.stage_bubbles]
    assert all(x["window_ms"] == a.pipeline.window_ms and x["schedule"] == a.pipeline.schedule for x in st)
    acts = pq.read_table(tmp_path / "pt" / "pipeline_actions.parquet")
    assert acts.num_rows == sum(len(r.pipeline_actions) for r in a.ranks) == 2 * 2 * case.m * case.steps

    send = [[0, 30], [50, 0]]
    traces, exp = moe_ep_ranks(send, layers=2, steps=2)
    m = tmp_path / "moe"
    for b in traces:
        b.write(m / f"rank{b.rank}.pt.trace.json")
    a = analyze_path(str(m), jobs=1)
    tb.write_tables(a, str(tmp_path / "pt"))  # the same folder: the pipeline tables of the last run must go
    t = _read(tmp_path / "pt")
    assert "pipeline_stages" not in t and "pipeline_actions" not in t
    assert [(x["rank"], x["received_rows"], x["sent_rows"]) for x in _rows(t["moe_ranks"])] == \
           [(r, exp.received[r], exp.sent[r]) for r in range(2)]
    layers = _rows(t["moe_layers"])
    assert len(layers) == 2 * 2 * 2 and {x["received_rows"] for x in layers} == {send[1][0], send[0][1]}


def test_missing_pyarrow_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    called = []
    monkeypatch.setattr("llmdiag.diagnose.analyze.analyze_path", lambda *a, **k: called.append(1))
    res = CliRunner().invoke(main, ["analyze", str(tmp_path), "--tables", str(tmp_path / "t")])
    assert res.exit_code == 2 and not called and not (tmp_path / "t").exists()
    lines = res.output.strip().splitlines()
    assert lines == ["llmdiag: --tables needs pyarrow, which is not installed (pip install 'llmdiag[tables]')"]


def test_unwritable_folder_is_one_line(skewed, tmp_path):
    a, _ = skewed
    (tmp_path / "file").write_text("x")
    with pytest.raises(tb.LlmdiagError, match="cannot create the tables folder"):
        tb.write_tables(a, str(tmp_path / "file" / "sub"))


def test_columns_are_documented():
    doc = open(os.path.join(ROOT, "docs", "python.md"), encoding="utf-8").read()
    for name, (_, spec) in tb.TABLES.items():
        assert f"`{name}`" in doc, name
        for col, _, _ in spec:
            assert f"`{col}`" in doc, (name, col)


def test_2048_ranks_rows_grow_linearly(tmp_path):
    """A cluster-sized Analysis (no traces: tests/gen/scenarios.py): one row per rank per item, nothing per
    pair of ranks, and every rank present."""
    from tests.gen.scenarios import base

    a = base(2048)
    tb.write_tables(a, str(tmp_path / "t"))
    t = _read(tmp_path / "t")
    assert t["ranks"].num_rows == 2048 and t["ranks"].column("rank").to_pylist() == list(range(2048))
    assert t["steps"].num_rows == sum(len(r.steps) for r in a.ranks)
    assert t["kernels"].num_rows == sum(len(r.top_kernels) for r in a.ranks)
    assert t["memory_timeline"].num_rows == sum(len(m.timeline) for r in a.ranks for m in r.memory)


def test_arrays_keep_nulls_and_values_exactly():
    for typ, t, vals in [(pa.float64(), "f64", [1.5, None, 0.0, -2e300, float("inf")]),
                         (pa.bool_(), "bool", [True, False, True, True, False, False, False, False, True]),
                         (pa.large_string(), "str", ["", None, "a\nb", "é" * 3]), (pa.int64(), "i64", [])]:
        arr = tb._array(pa, vals, typ, t)
        arr.validate(full=True)
        assert arr.to_pylist() == vals and arr.type == typ


def test_writing_tables_imports_no_pandas(tmp_path):
    """pa.array() over Python values imports pandas whenever it is installed: the tables are built without it."""
    import subprocess

    code = ("import sys; from tests.gen.scenarios import base; from llmdiag.diagnose.export.tables import write_tables; "
            f"write_tables(base(8), {str(tmp_path / 't')!r}); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr
