"""docs/python.md runs: its ```python blocks, in order and in one namespace, against a generated 4-rank GPU run,
and its table reference is the one diagnose/export/tables.py declares (so the two cannot drift)."""

from __future__ import annotations

import contextlib
import io
import os
import re

from llmdiag.diagnose.export.tables import schema_markdown
from tests.gen.builder import TraceBuilder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "python.md")


def _blocks() -> list[str]:
    text = open(DOC, encoding="utf-8").read()
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def _rank(rank: int, world: int = 4) -> TraceBuilder:
    """Per step a GEMM whose length grows with the rank, then an all-reduce every rank leaves together: rank 3
    computes longest and arrives last, so skew, stragglers and findings have something to say."""
    b = TraceBuilder(rank=rank, world_size=world, device_properties=[
        {"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 85_000_000_000}])
    for k in range(1, 5):
        k0 = (k - 1) * 3000
        c = 1000 + 300 * rank
        b.step(k, k0, k0 + 3000)
        b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", k0 + 100, c, stream=7,
                 launch_at=k0 + 10)
        b.kernel("void at::native::vectorized_elementwise_kernel<4>()", k0 + 100 + c, 50, stream=7, launch_at=k0 + 12)
        b.nccl("allreduce", k0 + 150 + c, 2400 - c, stream=20, launch_at=k0 + 11, nelems=1 << 22, dtype="BFloat16",
               group_size=world, pg_ranks=list(range(world)))
        b.memory(k0 + 60, (20 + rank) << 30, 30 << 30, nbytes=1)
        b.memory(k0 + 2900, 10 << 30, 30 << 30, nbytes=-1)
    return b


def test_every_python_block_runs(tmp_path, monkeypatch):
    blocks = _blocks()
    assert len(blocks) >= 8
    for r in range(4):
        _rank(r).write(tmp_path / "runs" / "demo" / f"rank{r}.pt.trace.json.gz")
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for i, code in enumerate(blocks):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(compile(code, f"docs/python.md block {i + 1}", "exec"), ns)  # the doc's own code
        assert out.getvalue().strip(), f"block {i + 1} printed nothing"
    a = ns["a"]
    assert len(a.ranks) == 4 and a.findings, "the demo run should have findings to show"
    assert os.path.isfile(tmp_path / "demo-report.html") and os.path.isfile(tmp_path / "tables" / "steps.parquet")


def test_table_reference_is_the_declared_schema():
    text = open(DOC, encoding="utf-8").read()
    assert text.rstrip().endswith(schema_markdown().rstrip()), \
        "docs/python.md's table reference differs from diagnose/export/tables.py: regenerate it with schema_markdown()"
