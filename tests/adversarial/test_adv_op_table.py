"""The straggler study's op tables (`trace-<job>.parquet` + `meta-<job>.yaml`) as attacks: a yaml alias bomb,
absurd or wrongly typed sizes, a FIFO or a huge file as the meta, a table whose columns hold the wrong
types or whose ops take no time, ranks outside the world, a row count beyond the cap.

Each table is built here: 2 workers (dp 2 × pp 1), 2 steps, per step and worker a forward and a backward op
of 10 and 20 ms and an optimizer of 5 ms, back to back, so the good table's answer is known (step 35 ms)."""

from __future__ import annotations

import os

import numpy as np
import orjson
import pytest

from tests.adversarial.conftest import attack, check

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("yaml")

META = "trial_name: T\ndp_size: 2\npp_size: 1\ntp_size: 1\nvpp_size: 1\nworld_size: 2\n"


def columns() -> dict:
    rows = []
    for rank in (0, 1):
        for step in (0, 1):
            t0 = step * 0.035
            for seq, (op, start, dur) in enumerate([("forward-compute", 0.0, 0.010), ("backward-compute", 0.010, 0.020),
                                                    ("optimizer", 0.030, 0.005)]):
                rows.append(dict(dp_rank=rank, stage=0, rank=rank, step=step, optype=op, start_ts=t0 + start,
                                 duration=dur, seq_id=0, mc=0 if "compute" in op else -1, mb_id=0 if "compute" in op
                                 else -1, gmc=0 if "compute" in op else -1))
    return {k: [r[k] for r in rows] for k in rows[0]}


def table(folder, meta: str | bytes | None = META, **cols):
    os.makedirs(folder, exist_ok=True)
    c = columns() | cols
    pq.write_table(pa.table(c), os.path.join(folder, "trace-T.parquet"))
    if meta is not None:
        with open(os.path.join(folder, "meta-T.yaml"), "wb") as f:
            f.write(meta.encode() if isinstance(meta, str) else meta)
    return folder


def analyze(tmp_path, folder, *extra):
    return attack("analyze", folder, "-q", "--json", tmp_path / "s.json", "--report", tmp_path / "r.html", *extra,
                  cwd=tmp_path)


def test_the_good_table(tmp_path):
    r = analyze(tmp_path, table(tmp_path / "t"))
    check(r, 0, one_line=False)
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert [round(x["step_time_ms"], 6) for x in s["ranks"]] == [35.0, 35.0]


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")) + \
    "trial_name: *i\ndp_size: 2\npp_size: 1\n"


@pytest.mark.parametrize("meta, words", [
    (LAUGHS, "aliases are not allowed"),  # billion laughs: 9^9 references from 1 kB
    (META.replace("world_size: 2", "world_size: 10000000000"), "world_size is not an integer from 1 to"),
    (META.replace("dp_size: 2", "dp_size: 1e11"), "dp_size is not an integer"),  # yaml 1.1: a string
    (META.replace("dp_size: 2", "dp_size: 100000000000"), "dp_size is not an integer from 1 to"),
    (META.replace("world_size: 2", "world_size: [1, 2]"), "world_size is not an integer"),
    (META.replace("tp_size: 1", "tp_size: abc"), "tp_size is not an integer"),
    (META.replace("dp_size: 2", "dp_size: true"), "dp_size is not an integer"),
    (META.replace("trial_name: T", "trial_name: {a: 1}"), "trial_name is not a short name"),
    (b"\x00\xff\xfe binary \x80\x81", "meta file is not UTF-8 text"),
    ("[" * 100_000, "unreadable meta file"),  # deep nesting: a RecursionError inside the parser
    ("- a\n- b\n", "meta file is not a mapping"),
])
def test_hostile_meta_is_one_line(tmp_path, meta, words):
    r = analyze(tmp_path, table(tmp_path / "t", meta))
    line = check(r, 2, words)
    assert "meta-T.yaml" in line
    assert not (tmp_path / "s.json").exists()


def test_meta_fifo_is_refused_not_waited_on(tmp_path):
    folder = table(tmp_path / "t", None)
    os.mkfifo(folder / "meta-T.yaml")
    check(analyze(tmp_path, folder), 2, "not a regular file (a named pipe)")


def test_huge_meta_is_refused_unread(tmp_path):
    folder = table(tmp_path / "t", None)
    with open(folder / "meta-T.yaml", "wb") as f:
        f.truncate(200 << 20)  # 200 MB (sparse): read whole before
    check(analyze(tmp_path, folder), 2, "meta file is larger than its 1 MiB budget")


@pytest.mark.parametrize("cols, words", [
    ({"start_ts": ["abc"] * 12}, "column start_ts holds string, not numbers"),
    ({"rank": [0.5] * 12}, "column rank holds double, not numbers"),
    ({"optype": [1] * 12}, "column optype holds int64, not text"),
    ({"rank": [0] * 6 + [5] * 6}, "rank outside the meta's world of 2 workers"),
    ({"duration": [float("nan")] * 12}, "negative, NaN or infinite"),
    ({"start_ts": [1e300] * 12}, "beyond 1e+09 s"),
])
def test_hostile_columns_are_one_line(tmp_path, cols, words):
    line = check(analyze(tmp_path, table(tmp_path / "t", **cols)), 2, words)
    assert "trace-T.parquet" in line


def test_ops_that_take_no_time_are_analysed_without_a_what_if(tmp_path):
    """Every duration 0 (a ZeroDivisionError before): the steps are analysed, the what-if says why not."""
    r = analyze(tmp_path, table(tmp_path / "t", duration=[0.0] * 12))
    check(r, 0, one_line=False)
    s = orjson.loads((tmp_path / "s.json").read_bytes())
    assert any("what-if not simulated" in i["message"] and "no op that takes time" in i["message"] for i in s["issues"])


def test_a_table_and_kineto_traces_in_one_folder_is_refused(tmp_path):
    """Analysing the table alone silently dropped the traces beside it."""
    folder = table(tmp_path / "t")
    (folder / "rank0.json").write_bytes(orjson.dumps({"traceEvents": []}))
    check(analyze(tmp_path, folder), 2, "op table", "Kineto trace")


def test_row_cap_is_read_from_the_footer(tmp_path, monkeypatch):
    """60 M rows were read whole (2 GB) before the cap was checked: the footer's count refuses them unread."""
    from llmdiag.diagnose.io import megatron_ops

    folder = table(tmp_path / "t")
    monkeypatch.setattr(megatron_ops, "MAX_OPS", 5)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("columns read past the cap"))
    with pytest.raises(megatron_ops.LlmdiagError, match="12 ops: more than 5 in one table"):
        megatron_ops.read_op_table(str(folder / "trace-T.parquet"))


def test_only_the_needed_columns_are_read(tmp_path, monkeypatch):
    from llmdiag.diagnose.io import megatron_ops

    folder = table(tmp_path / "t", extra=np.zeros(12).tolist())
    seen = []
    real = pq.ParquetFile.read
    monkeypatch.setattr(pq.ParquetFile, "read", lambda self, columns=None, **k: seen.append(columns) or
                        real(self, columns=columns, **k))
    megatron_ops.read_op_table(str(folder / "trace-T.parquet"))
    assert seen == [list(megatron_ops.COLUMNS)]
