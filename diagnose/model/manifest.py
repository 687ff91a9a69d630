"""manifest.json as a type: what `llmdiag run` knew that no trace says (layout, schedule, batch, device).

Keys follow docs/run-folder.md. Fields the analyzer reads are typed; free-form records (model config,
profiler schedule, per-rank status, launch details) stay plain mappings, and keys this version does not
know are kept in `extra` so a summary round-trips the manifest it was given.
"""

from __future__ import annotations

from collections import Counter

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.model.dims import DIMS, MAX_WORLD, layout_text  # noqa: F401 (re-export)

# run options the analysis reads as numbers (rules, accum, memory): a string there is a hand-edited manifest
NUMERIC_OPTIONS = ("bucket_cap_mb", "global_batch", "grad_accum", "micro_batch")


@dataclass
class DeviceInfo:
    type: str = ""  # "cuda" or "cpu"
    name: str = ""
    memory_bytes: int | None = None
    peak_flops: float | None = None  # dense bf16 FLOP/s of one device
    count: int | None = None


@dataclass
class BatchInfo:
    global_batch: int | None = None
    local_batch: int | None = None  # sequences per data-parallel replica per step
    micro_batch: int | None = None
    seq_len: int | None = None


@dataclass
class PipelineConfig:
    schedule: str | None = None
    microbatches: int | None = None
    stages: int | None = None
    stages_per_rank: int | None = None
    pp: int | None = None


@dataclass
class Manifest:
    schema_version: int = 1
    workload: str | None = None
    layout: dict[str, int] | None = None
    world_size: int | None = None
    mesh_dim_names: list[str] = field(default_factory=list)
    ranks: dict[str, dict] = field(default_factory=dict)  # rank -> mesh coordinates, "stages", "host"
    pipeline: PipelineConfig | None = None
    model: dict | None = None
    batch: BatchInfo | None = None
    tokens_per_step: int | None = None
    model_flops_per_step: float | None = None
    backend: str | None = None
    device: DeviceInfo | None = None
    dtype: str | None = None
    torch_version: str | None = None
    llmdiag_version: str | None = None
    profiler: dict | None = None
    steps: int | None = None
    options: dict = field(default_factory=dict)  # the run's options as `llmdiag run` resolved them
    command: list[str] = field(default_factory=list)
    cpu_cores: int | None = None
    oversubscribed: bool = False
    launch: dict | None = None
    rank_status: dict[str, dict] = field(default_factory=dict)
    status: str | None = None
    failure: dict | str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    extra: dict = field(default_factory=dict, metadata={"rest": True})  # keys this version does not know

    # ---- per-rank facts ----------------------------------------------------------------------------------
    def _entry(self, rank: int) -> dict:
        e = self.ranks.get(str(rank))
        return e if isinstance(e, dict) else {}

    def host_of(self, rank: int) -> str | None:
        h = self._entry(rank).get("host")
        return str(h) if h else None

    def coords_of(self, rank: int) -> dict[str, int]:
        """Mesh coordinates of `rank` ({"dp": 0, "tp": 1, ...}); empty when the manifest has none."""
        return {k: v for k, v in self._entry(rank).items() if k in DIMS and isinstance(v, int)}

    def profiler_cost_ms(self, rank: int) -> float | None:
        """The profiler's own cost per step on `rank`: its profiled steps' mean time minus that of the steps
        run after the profiler stopped (`llmdiag run` records both); None where either is missing."""
        e = self.rank_status.get(str(rank))
        p, u = (e.get("profiled_step_ms"), e.get("unprofiled_step_ms")) if isinstance(e, dict) else (None, None)
        ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in (p, u))
        return max(0.0, float(p) - float(u)) if ok else None

    def stages_of(self, rank: int) -> list[int]:
        st = self._entry(rank).get("stages")
        return [s for s in st if isinstance(s, int)] if isinstance(st, list) else []

    def ranks_per_host(self) -> int | None:
        hosts = [str(e["host"]) for e in self.ranks.values() if isinstance(e, dict) and e.get("host")]
        return max(Counter(hosts).values()) if hosts else None

    def option(self, name: str):
        """A run option as `llmdiag run` recorded it, or None when the manifest does not say (or, for a
        numeric option, says something that is not a positive number: `problems` names it)."""
        v = self.options.get(name) if isinstance(self.options, dict) else None
        if name in NUMERIC_OPTIONS and not _positive(v):
            return None
        return v

    def problems(self) -> list[str]:
        """Values of the right JSON type but not of a real run, one phrase each: a numeric option that is not a
        positive number, a world or mesh size outside 1..MAX_WORLD."""
        out = []
        opts = self.options if isinstance(self.options, dict) else {}
        for k in NUMERIC_OPTIONS:
            if opts.get(k) is not None and not _positive(opts[k]):
                out.append(f"options.{k} is not a positive number ({str(opts[k])[:40]!r})")
        sizes = [("world_size", self.world_size)] + [(f"layout.{k}", v) for k, v in (self.layout or {}).items()]
        for k, v in sizes:
            if v is not None and not (type(v) is int and 1 <= v <= MAX_WORLD):
                out.append(f"{k} is not a size from 1 to {MAX_WORLD} ({str(v)[:40]})")
        return out

    def failed_ranks(self) -> dict[str, dict]:
        """rank -> status record, for ranks whose status is not "ok"."""
        return {r: st for r, st in self.rank_status.items()
                if isinstance(st, dict) and st.get("status") not in (None, "ok")}

    @property
    def local_batch(self) -> int | None:
        """Sequences per data-parallel replica per step (bounds the microbatch count)."""
        if self.batch and self.batch.local_batch:
            return self.batch.local_batch
        gb = self.option("global_batch") or (self.batch.global_batch if self.batch else None)
        if not gb:
            return None
        lay = self.layout or {}
        return max(1, int(gb) // max(1, int(lay.get("dp") or 1) * int(lay.get("fsdp") or 1)))


def _positive(v) -> bool:
    return type(v) in (int, float) and 0 < v < float("inf")
