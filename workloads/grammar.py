"""Workload strings (`tp4pp2`, `dp2tp2pp2`, `fsdp8`, `single`) and the checks that make a layout runnable.

Torch-free on purpose: `llmdiag run` parses and validates here, so a bad string or a layout the model cannot
be split into exits 2 with one line before any process starts. The same functions run again inside every
rank, so launcher and ranks agree on microbatches, batch sizes and the stage-to-rank map.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.config import ModelConfig

DIMS = ("dp", "fsdp", "tp", "pp", "cp")
# DeviceMesh order, outermost first (torchtitan's): pp, then data parallel (replicate, shard), cp, tp innermost
# so that TP groups are the closest ranks (same node / NVLink).
MESH_ORDER = ("pp", "dp", "fsdp", "cp", "tp")
SCHEDULES = ("gpipe", "1f1b", "interleaved1f1b", "zbv", "dualpipev")
DEFAULT_SCHEDULE = "1f1b"
V_SCHEDULES = ("zbv", "dualpipev")  # two stages per rank, placed in a V
_TOKEN = re.compile(r"(fsdp|dp|tp|pp|cp|ep)")


@dataclass(frozen=True)
class Layout:
    """Sizes of the five parallel dimensions; 1 where absent. `ep` borrows ranks from dp x fsdp (torchtitan):

    the data-parallel replicas r = dp_coord*fsdp + fsdp_coord form EP groups of `ep` consecutive replicas
    (ep coordinate r % ep); experts are sharded over an EP group and replicated over the dp*fsdp/ep groups
    (`edp`, same r % ep). ep does not change the world size.
    """

    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    @property
    def world_size(self) -> int:
        return self.dp * self.fsdp * self.tp * self.pp * self.cp

    @property
    def mesh_dims(self) -> list[str]:
        """DeviceMesh dimension names, outermost first, sizes > 1 only."""
        return [d for d in MESH_ORDER if getattr(self, d) > 1]

    def as_dict(self) -> dict[str, int]:
        out = {d: getattr(self, d) for d in DIMS}
        return out | {"ep": self.ep} if self.ep > 1 else out

    def ep_coords(self, rank: int) -> tuple[int, int]:
        """(ep coordinate, edp coordinate) of a rank: its place in its EP group and which EP group it is in."""
        c = self.coords(rank)
        replica = c["dp"] * self.fsdp + c["fsdp"]
        return replica % self.ep, replica // self.ep

    def ep_groups(self) -> tuple[list[list[int]], list[list[int]]]:
        """(EP groups, expert-data-parallel groups) as lists of global ranks, in a fixed order for new_group."""
        ep: dict[tuple, list[int]] = {}
        edp: dict[tuple, list[int]] = {}
        for r in range(self.world_size):
            c = self.coords(r)
            rest = (c["pp"], c["cp"], c["tp"])
            e, g = self.ep_coords(r)
            ep.setdefault(rest + (g,), []).append(r)
            edp.setdefault(rest + (e,), []).append(r)
        return list(ep.values()), list(edp.values())

    def coords(self, rank: int) -> dict[str, int]:
        """Mesh coordinates of a global rank (row-major over MESH_ORDER, as init_device_mesh lays ranks out)."""
        out = {}
        for d in reversed(MESH_ORDER):
            size = getattr(self, d)
            out[d] = rank % size
            rank //= size
        return {d: out[d] for d in MESH_ORDER}


def parse_workload(text: str) -> Layout:
    """`tp4pp2` -> Layout(tp=4, pp=2). `single` is one process. Raises WorkloadError with one line."""
    s = text.strip().lower()
    if s in ("single", ""):
        if not s:
            raise WorkloadError("empty workload string", hint="e.g. single, dp2, fsdp8, tp2pp2, tp2cp2")
        return Layout()
    sizes: dict[str, int] = {}
    pos = 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise WorkloadError(f"workload {text!r}: unexpected {s[pos:]!r}",
                                hint="concatenate dpN, fsdpN, tpN, ppN, cpN, epN, e.g. dp2tp2pp2")
        dim = m.group(1)
        digits = re.match(r"\d+", s[m.end():])
        if not digits:
            raise WorkloadError(f"workload {text!r}: {dim} needs a size", hint=f"e.g. {dim}2")
        n = int(digits.group())
        if n < 1:
            raise WorkloadError(f"workload {text!r}: {dim} size must be >= 1, got {n}")
        if dim in sizes:
            raise WorkloadError(f"workload {text!r}: {dim} given twice")
        sizes[dim] = n
        pos = m.end() + len(digits.group())
    ep = sizes.get("ep", 1)
    if ep > 1 and sizes.get("dp", 1) * sizes.get("fsdp", 1) == 1:
        sizes["dp"] = ep  # `ep2` alone: the EP group is a data-parallel group of 2 (torchtitan's dp_shard = ep)
    if (sizes.get("dp", 1) * sizes.get("fsdp", 1)) % ep:
        raise WorkloadError(f"workload {text!r}: ep{ep} must divide dp x fsdp = {sizes.get('dp', 1) * sizes.get('fsdp', 1)}",
                            hint="ep borrows its ranks from the data-parallel dimension, e.g. dp4ep2")
    return Layout(**sizes)


@dataclass(frozen=True)
class Pipeline:
    """A pipeline schedule and how stages and layers map onto pp ranks."""

    schedule: str
    microbatches: int
    pp: int
    stages_per_rank: int
    layers: int

    @property
    def stages(self) -> int:
        return self.pp * self.stages_per_rank

    def stage_rank(self, stage: int) -> int:
        """pp rank holding a stage: looped (stage % pp) or V (0..p-1 then back p-1..0), as torch maps them."""
        if self.schedule in V_SCHEDULES:
            return stage if stage < self.pp else self.stages - 1 - stage
        return stage % self.pp

    def stages_of(self, pp_rank: int) -> list[int]:
        return [s for s in range(self.stages) if self.stage_rank(s) == pp_rank]

    def layers_of(self, stage: int) -> list[int]:
        """Contiguous split of the layer indices; the first `layers % stages` stages take one extra."""
        base, extra = divmod(self.layers, self.stages)
        start = stage * base + min(stage, extra)
        return list(range(start, start + base + (1 if stage < extra else 0)))

    def manifest(self) -> dict:
        return {"schedule": self.schedule, "microbatches": self.microbatches, "stages": self.stages,
                "stages_per_rank": self.stages_per_rank, "pp": self.pp}


@dataclass(frozen=True)
class Plan:
    """Everything the launcher and every rank must agree on, derived from the options."""

    workload: str
    layout: Layout
    model: ModelConfig
    pipeline: Pipeline | None
    global_batch: int
    sp: bool = False
    extra: dict = field(default_factory=dict)
    grad_accum: int = 1

    @property
    def dp_replicas(self) -> int:
        return self.layout.dp * self.layout.fsdp

    @property
    def local_batch(self) -> int:
        """Sequences per data-parallel replica per step."""
        return self.global_batch // self.dp_replicas

    @property
    def micro_batch(self) -> int:
        return self.local_batch // (self.pipeline.microbatches if self.pipeline else self.grad_accum)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.model.seq_len

    @property
    def model_flops_per_step(self) -> float:
        return self.model.flops_per_token() * self.tokens_per_step

    def stages_of(self, rank: int) -> list[int]:
        if not self.pipeline:
            return [0]
        return self.pipeline.stages_of(self.layout.coords(rank)["pp"])


def resolve(workload: str, model: ModelConfig, *, schedule: str | None = None, microbatches: int | None = None,
            batch_given: bool = False, sp: bool = False, ranks_available: int | None = None,
            ranks_reason: str = "", grad_accum: int = 1, zero: int = 0) -> Plan:
    """Parse and validate a workload against a model; fill in defaults (schedule 1f1b, 2·pp microbatches).

    A default global batch is rounded up to a multiple of dp·fsdp·microbatches; an explicit `--batch` that
    does not divide is an error.
    """
    lay = parse_workload(workload)
    tp, pp, cp = lay.tp, lay.pp, lay.cp
    if ranks_available is not None:
        check_ranks(workload, lay.world_size, ranks_available, ranks_reason)
    if model.heads % tp:
        raise WorkloadError(f"tp{tp}: {model.heads} attention heads are not divisible by {tp}",
                            hint=f"tp must divide heads={model.heads}")
    if model.kv_heads % tp:
        raise WorkloadError(f"tp{tp}: {model.kv_heads} kv heads are not divisible by {tp}",
                            hint=f"tp must divide kv_heads={model.kv_heads}")
    if model.ffn % tp or model.vocab % tp:
        raise WorkloadError(f"tp{tp}: ffn {model.ffn} or vocab {model.vocab} not divisible by {tp}")
    seq_split = cp * (tp if sp else 1)
    if model.seq_len % seq_split:
        raise WorkloadError(f"seq_len {model.seq_len} is not divisible by {seq_split} "
                            f"({'cp x tp with --sp' if sp else 'cp'})")
    if sp and tp == 1:
        raise WorkloadError("--sp (sequence parallel) needs a tp dimension")
    _check_moe(workload, lay, model, sp)
    if grad_accum < 1:
        raise WorkloadError(f"--grad-accum must be >= 1, got {grad_accum}")
    if grad_accum > 1 and pp > 1:
        raise WorkloadError("--grad-accum with pp: pipeline microbatches already accumulate",
                            hint="use --microbatches")
    if zero not in (0, 1):
        raise WorkloadError(f"--zero {zero}: only 0 or 1 (ZeRO-2/3 is fsdpN, see docs/workloads.md)")
    if zero == 1 and not (lay.dp > 1 and lay.fsdp == 1 and tp == 1 and pp == 1 and lay.ep == 1):
        raise WorkloadError(f"--zero 1 needs a plain dpN layout (DDP + ZeroRedundancyOptimizer), got {workload!r}",
                            hint="e.g. dp2 --zero 1; for sharded gradients/weights use fsdpN")

    pipeline = None
    if pp == 1:
        if schedule is not None or microbatches is not None:
            raise WorkloadError("--schedule/--microbatches need a pp dimension", hint=f"e.g. {workload}pp2")
    else:
        schedule = schedule or DEFAULT_SCHEDULE
        if schedule not in SCHEDULES:
            raise WorkloadError(f"unknown pipeline schedule {schedule!r}", hint="one of " + ", ".join(SCHEDULES))
        v = 1 if schedule in ("gpipe", "1f1b") else 2
        m = microbatches if microbatches is not None else 2 * pp
        pipeline = Pipeline(schedule, m, pp, v, model.layers)
        if m < 1:
            raise WorkloadError(f"--microbatches must be >= 1, got {m}")
        if pipeline.stages > model.layers:
            raise WorkloadError(f"pp{pp}: {pipeline.stages} pipeline stages but the model has {model.layers} layers",
                                hint="use --layers or a smaller pp")
        if schedule == "1f1b" and m < pp:
            raise WorkloadError(f"1f1b needs microbatches >= pp ({pp}), got {m}")
        if schedule == "dualpipev" and m < pipeline.stages:
            raise WorkloadError(f"dualpipev needs microbatches >= stages ({pipeline.stages}), got {m}")
        if schedule == "interleaved1f1b" and m % max(1, m // pp):
            raise WorkloadError(f"interleaved1f1b needs microbatches divisible by {max(1, m // pp)}, got {m}")

    per_step = lay.dp * lay.fsdp * (pipeline.microbatches if pipeline else grad_accum)
    batch = model.batch
    if batch % per_step:
        if batch_given:
            raise WorkloadError(f"--batch {batch} is not divisible by dp x fsdp x microbatches (or grad-accum) = {per_step}")
        batch = math.ceil(batch / per_step) * per_step
        model = replace(model, batch=batch)
    return Plan(workload=workload, layout=lay, model=model, pipeline=pipeline, global_batch=batch, sp=sp,
                grad_accum=grad_accum)


def check_ranks(workload: str, world_size: int, available: int, reason: str = "") -> None:
    """The ranks a launcher can start must be the layout's world size (checked again once the GPUs are counted)."""
    if world_size != available:
        raise WorkloadError(f"workload {workload!r} needs {world_size} ranks but {available} are available"
                            + (f" ({reason})" if reason else ""))


def _check_moe(workload: str, lay: Layout, model: ModelConfig, sp: bool) -> None:
    """An ep dimension needs experts that split evenly over it; MoE composes with dp/fsdp/tp/pp, not cp or sp."""
    e = model.moe_experts
    if lay.ep > 1 and not e:
        raise WorkloadError(f"workload {workload!r}: ep{lay.ep} needs a MoE model", hint="add --moe-experts E")
    if e and e % lay.ep:
        raise WorkloadError(f"ep{lay.ep}: {e} experts are not divisible by {lay.ep}", hint="ep must divide --moe-experts")
    if e and lay.cp > 1:
        raise WorkloadError("--moe-experts with cp: the per-sequence balance loss needs whole sequences")
    if e and sp:
        raise WorkloadError("--moe-experts with --sp is not supported (experts see replicated tokens under tp)")
