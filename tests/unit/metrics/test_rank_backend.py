"""Each rank's `backend` is its trace's distributedInfo backend (issue 36: a trace of an nccl job with no GPU
activity was called "CPU-only (gloo)"). Generated traces whose header says the backend."""

from __future__ import annotations

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import cpu_rank, gpu_rank


def test_backend_is_the_traces(tmp_path):
    for r in range(2):
        cpu_rank(rank=r, world_size=2).write(tmp_path / "gloo" / f"rank{r}.json")
        gpu_rank(rank=r, world_size=2).write(tmp_path / "nccl" / f"rank{r}.json")
    assert {m.backend for m in analyze_path(str(tmp_path / "gloo"), jobs=1, rules=False).ranks} == {"gloo"}
    assert {m.backend for m in analyze_path(str(tmp_path / "nccl"), jobs=1, rules=False).ranks} == {"nccl"}


def test_cpu_caveat_names_the_traces_backend(tmp_path):
    """The CPU-only caveat says gloo only where the traces say gloo: a CPU-only capture of an nccl job (no CUDA
    activity recorded) is not a gloo run (issue 36)."""
    from tests.gen.builder import TraceBuilder

    for r in range(2):
        cpu_rank(rank=r, world_size=2).write(tmp_path / "gloo" / f"rank{r}.json")
        b = cpu_rank(rank=r, world_size=2)
        assert isinstance(b, TraceBuilder)
        b.backend = "nccl"
        b.write(tmp_path / "nccl" / f"rank{r}.json")

    def caveat(d):
        return [f.evidence.text for f in analyze_path(str(tmp_path / d), jobs=1).findings
                if f.id == "contaminated_timings"]

    assert any("CPU-only (gloo)" in t for t in caveat("gloo"))
    nccl = caveat("nccl")
    assert nccl and not any("gloo" in t for t in nccl) and any("nccl" in t for t in nccl)
