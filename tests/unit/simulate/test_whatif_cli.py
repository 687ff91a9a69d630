"""`llmdiag analyze trace-<job>.parquet`: the straggler study's op tables as a trace kind of their own, end to
end (terminal, summary round-trip, report), and the bad inputs a user can give it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from llmdiag.diagnose.cli.main import main
from llmdiag.diagnose.io.megatron_ops import read_op_table
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.simulate.artifact import whatif_of_table

pytestmark = pytest.mark.real
BYTEDANCE = (Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "real" / "bytedance").resolve()


@pytest.fixture()
def job(tmp_path):
    for f in ("trace-ST.parquet", "meta-ST.yaml"):
        shutil.copy(BYTEDANCE / f, tmp_path / f)
    return tmp_path


def _analyze(path, tmp_path, *extra):
    return CliRunner().invoke(main, ["analyze", str(path), "--json", str(tmp_path / "s.json"),
                                     "--report", str(tmp_path / "r.html"), *extra])


def test_terminal_summary_and_report(job, tmp_path):
    res = _analyze(job / "trace-ST.parquet", tmp_path)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "8 ranks analysed" in out
    assert "slowdown S: 1.179" in out
    assert "top contributors: stage 3 1.232, DP rank 1 1.178, DP rank 0 1.173" in out
    assert "M_S (last stage): 121.9%" in out and "M_W (worst workers): 3.1%" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    back = Analysis.from_dict(summary)
    assert back.whatif.slowdown == pytest.approx(1.1787, rel=1e-3)
    assert {(c.group, c.key) for c in back.whatif.contributions} >= {("stage", "3"), ("optype", "forward-compute")}
    html = (tmp_path / "r.html").read_text()
    assert 'id="whatif"' in html and "embedding-grads-all-reduce" in html


def test_the_artifact_folder_reads_its_op_table(job, tmp_path):
    shutil.copy(BYTEDANCE / "timeline-ST.json.gz", job / "timeline-ST.json.gz")  # not Kineto ranks: not read
    res = _analyze(job, tmp_path)
    assert res.exit_code == 0 and "slowdown S: 1.179" in res.output and "timeline" not in res.output
    shutil.copy(job / "trace-ST.parquet", job / "trace-XX.parquet")
    res = _analyze(job, tmp_path)
    assert res.exit_code == 2 and "2 straggler-study op tables in one folder" in res.output


def test_missing_meta_is_one_line(job, tmp_path):
    (job / "meta-ST.yaml").unlink()
    res = _analyze(job / "trace-ST.parquet", tmp_path)
    assert res.exit_code == 2
    assert "no meta-*.yaml beside the op table" in res.output and "Traceback" not in res.output


def test_broken_parquet_is_one_line(job, tmp_path):
    (job / "trace-ST.parquet").write_bytes(b"PAR1 not really")
    res = _analyze(job / "trace-ST.parquet", tmp_path)
    assert res.exit_code == 2 and "unreadable parquet file" in res.output


def test_wrong_columns_is_one_line(job, tmp_path):
    pq.write_table(pa.table({"a": [1, 2]}), job / "trace-ST.parquet")
    res = _analyze(job / "trace-ST.parquet", tmp_path)
    assert res.exit_code == 2 and "not a straggler-study op table: no column dp_rank" in res.output


def test_meta_contradicting_the_table(job, tmp_path):
    (job / "meta-ST.yaml").write_text("trial_name: ST\ndp_size: 1\npp_size: 4\nworld_size: 4\n")
    res = _analyze(job / "trace-ST.parquet", tmp_path)
    assert res.exit_code == 2 and "outside the meta's dp_size 1" in res.output


def test_a_missing_op_gives_no_partial_answer(job, tmp_path):
    """One forward-compute of one worker in one step removed: the graph cannot be laid over every step, so no
    S is given, and the section says what is missing."""
    t = pq.read_table(job / "trace-ST.parquet")
    df = t.to_pandas()
    drop = df[(df.optype == "forward-compute") & (df.step == 259) & (df["rank"] == 5) & (df.seq_id == 2)].index
    assert len(drop) == 1
    pq.write_table(pa.Table.from_pandas(df.drop(drop), preserve_index=False), job / "trace-ST.parquet")
    w = whatif_of_table(read_op_table(str(job / "trace-ST.parquet")))
    assert w.slowdown is None and w.contributions == []
    assert "1 ops of the template are absent" in w.missing[0] and "step 259" in w.missing[0]
    res = _analyze(job / "trace-ST.parquet", tmp_path)
    assert res.exit_code == 0
    assert "not simulated:" in res.output and "slowdown S" not in res.output


def test_missing_pyarrow_names_the_extra(job, monkeypatch):
    import llmdiag.diagnose.io.megatron_ops as mo

    real = mo.importlib.import_module
    monkeypatch.setattr(mo.importlib, "import_module",
                        lambda name: (_ for _ in ()).throw(ImportError(name)) if name.startswith("pyarrow") else real(name))
    from llmdiag.diagnose.errors import LlmdiagError

    with pytest.raises(LlmdiagError, match=r"needs pyarrow.parquet \(pip install 'llmdiag\[whatif\]'\)"):
        read_op_table(str(job / "trace-ST.parquet"))
