"""The options of one run, declared once: `llmdiag run`'s click options and each rank's argv parser come from here.

RunOptions is what reaches the ranks: the launcher turns it into argv for torchrun (`to_argv`), each rank
parses it back (`from_argv`) and calls `plan()`, so both sides derive the same Plan from the same text.
LaunchOptions is what only the launcher needs (timeout, nodes, rendezvous). Every field carries its default,
help, choices and flag spelling (`opt`); `cli_options` reads them for both the click command
(diagnose/cli/run.py) and argparse here, so no default or help text is written twice. Torch-free.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from types import NoneType

from llmdiag.workloads import faults, slow
from llmdiag.workloads.config import SIZES, model_config
from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.grammar import DEFAULT_SCHEDULE, SCHEDULES, Plan, resolve

DEFAULT_TAIL_STEPS = 3  # unprofiled steps after the profiler stops, to measure its overhead
DEVICES = ("auto", "cpu", "cuda")


def opt(default=MISSING, help: str = "", *, choices=None, flag: str | None = None, short: str | None = None,
        shown: str | None = None, hidden: bool = False, argv_required: bool = False):
    """A dataclass field that is also a command-line option.

    `flag` overrides `--field-name`; `short` adds an alias (`-w`); `shown` is the `[default: ...]` text for a
    default that is decided later (None here, filled by the plan); `argv_required` makes a rank refuse argv
    without it (the launcher always passes it, so the CLI need not).
    """
    return field(default=default, metadata={"help": help, "choices": choices, "flag": flag, "short": short,
                                             "shown": shown, "hidden": hidden, "argv_required": argv_required})


@dataclass(frozen=True)
class CliOption:
    """One field as a command-line option. kind: `flag` (bool, off by default), `tristate` (bool | None:
    `--x/--no-x`, None when neither is given) or `value` (int, float or str, one argument)."""

    name: str
    flag: str
    kind: str
    type: type
    default: object
    required: bool
    help: str
    choices: tuple | None
    short: str | None
    shown: str | None
    hidden: bool
    argv_required: bool

    @property
    def negative(self) -> str:
        return "--no-" + self.flag[2:]


def cli_options(cls) -> list[CliOption]:
    """The fields of an options dataclass, in declaration order, as command-line options."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        args = typing.get_args(hints[f.name])
        base = next(a for a in args if a is not NoneType) if args else hints[f.name]
        kind = "value" if base is not bool else ("tristate" if NoneType in args else "flag")
        if kind == "flag" and f.default is not False:
            raise TypeError(f"{cls.__name__}.{f.name}: a flag must default to False")
        m = f.metadata
        out.append(CliOption(f.name, m["flag"] or "--" + f.name.replace("_", "-"), kind, base,
                             None if f.default is MISSING else f.default, f.default is MISSING, m["help"],
                             tuple(m["choices"]) if m["choices"] else None, m["short"], m["shown"], m["hidden"],
                             m["argv_required"]))
    return out


def pick(cls, values: dict):
    """An options dataclass from a dict that may hold other classes' options too (click's kwargs)."""
    return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


@dataclass
class RunOptions:
    workload: str = opt(help="Parallel layout: any concatenation of dpN fsdpN tpN ppN cpN (tp2pp2, dp2tp2pp2, "
                             "fsdp8), or single.", short="-w")
    model: str = opt("tiny", "Model size: " + ", ".join(SIZES) + " (tiny is the CPU default).")
    layers: int | None = opt(None, "Override the number of decoder layers.")
    hidden: int | None = opt(None, "Override the hidden size (SwiGLU width follows).")
    seq_len: int | None = opt(None, "Override the sequence length.")
    batch: int | None = opt(None, "Global batch in sequences.", shown="the size's, rounded to divide")
    schedule: str | None = opt(None, "Pipeline schedule (pp only).", choices=SCHEDULES, shown=DEFAULT_SCHEDULE)
    microbatches: int | None = opt(None, "Pipeline microbatches per step (pp only).", shown="2 x pp")
    steps: int | None = opt(None, "Total optimizer steps.",
                            shown=f"profiled steps + {DEFAULT_TAIL_STEPS} unprofiled")
    profile_steps: str = opt("1,1,3", "Profiler schedule WAIT,WARMUP,ACTIVE.")
    out: str = opt("", "Run folder.", shown="runs/<workload>-<YYYYmmdd-HHMMSS>", argv_required=True)
    device: str = opt("auto", "cuda (NCCL, one GPU per rank) when available, else cpu (gloo).", choices=DEVICES)
    sp: bool = opt(False, "Sequence parallel with tp.")
    bucket_cap_mb: float = opt(25.0, "DDP gradient bucket size.")
    reshard_after_forward: bool | None = opt(None, "FSDP: free gathered weights after forward.",
                                             shown="on, off under pp")
    ac: bool = opt(False, "Activation checkpointing per decoder block.")
    with_stack: bool = opt(False, "Record Python stacks in the traces (larger, slower).")
    moe_experts: int = opt(0, "Mixture of experts: experts per MoE layer (0: dense SwiGLU).")
    moe_topk: int = opt(2, "MoE: experts per token.")
    moe_every: int = opt(1, "MoE: every k-th layer is MoE (layers 0, k, 2k, ...).")
    moe_capacity: float = opt(0.0, "MoE: capacity factor per source rank (0: drop nothing).")
    moe_route_skew: float = opt(0.0, "MoE test knob: this share of each rank's tokens picks expert 0 first, "
                                     "the rest round-robin (planted, known imbalance; 0: learned router).")
    moe_aux_weight: float = opt(0.01, "MoE: weight of the per-sequence load-balancing loss.")
    grad_accum: int = opt(1, "Gradient accumulation microsteps per optimizer step (DDP no_sync, FSDP2 "
                             "set_requires_gradient_sync).")
    accum_keep_gathered: bool = opt(False, "FSDP with --grad-accum: keep parameters gathered across the "
                                           "microsteps (gather once per optimizer step; more memory).")
    zero: int = opt(0, "ZeRO stage for dpN: 0, or 1 = DDP + ZeroRedundancyOptimizer (2/3: use fsdpN).")
    seed: int = opt(0, "Seed for weights and data.")
    lr: float = opt(1e-3, "AdamW learning rate.")
    inject_slow: str | None = opt(None, "Planted straggler: rank:<R>:<FACTOR>[:forward|backward] runs that rank's "
                                        "compute FACTOR times as long (recorded in the manifest).")

    # -- derived ---------------------------------------------------------------------------------------------
    def profile(self) -> tuple[int, int, int]:
        """(wait, warmup, active) from `W,U,A`; a single number A means `1,1,A`."""
        try:
            parts = [int(p) for p in self.profile_steps.split(",")]
        except ValueError:
            parts = []
        if len(parts) == 1:
            parts = [1, 1, parts[0]]
        if len(parts) != 3 or parts[0] < 0 or parts[1] < 0 or parts[2] < 1:
            raise WorkloadError(f"--profile-steps {self.profile_steps!r}: expected WAIT,WARMUP,ACTIVE with ACTIVE >= 1",
                                hint="e.g. 1,1,3")
        return parts[0], parts[1], parts[2]

    def total_steps(self) -> int:
        profiled = sum(self.profile())
        steps = self.steps if self.steps is not None else profiled + DEFAULT_TAIL_STEPS
        if steps < profiled:
            raise WorkloadError(f"--steps {steps} is fewer than the {profiled} steps of --profile-steps "
                                f"{self.profile_steps}")
        return steps

    def plan(self, ranks_available: int | None = None, ranks_reason: str = "") -> Plan:
        cfg = model_config(self.model, layers=self.layers, hidden=self.hidden, seq_len=self.seq_len,
                           batch=self.batch, moe_experts=self.moe_experts, moe_topk=self.moe_topk,
                           moe_every=self.moe_every, moe_capacity=self.moe_capacity,
                           moe_route_skew=self.moe_route_skew, moe_aux_weight=self.moe_aux_weight)
        plan = resolve(self.workload, cfg, schedule=self.schedule, microbatches=self.microbatches,
                       batch_given=self.batch is not None, sp=self.sp, ranks_available=ranks_available,
                       ranks_reason=ranks_reason, grad_accum=self.grad_accum, zero=self.zero)
        if self.accum_keep_gathered and (plan.grad_accum < 2 or plan.layout.fsdp < 2):
            raise WorkloadError("--accum-keep-gathered needs fsdpN and --grad-accum >= 2",
                                hint="e.g. fsdp2 --grad-accum 4 --accum-keep-gathered")
        return plan

    def reshard(self, plan: Plan) -> bool:
        """FSDP reshard_after_forward: torchtitan's default, off under PP (it would re-gather per microbatch)."""
        if self.reshard_after_forward is not None:
            return self.reshard_after_forward
        return plan.pipeline is None

    def manifest(self, plan: Plan) -> dict:
        d = asdict(self)
        d.pop("out")
        d.update(schedule=plan.pipeline.schedule if plan.pipeline else None,
                 microbatches=plan.pipeline.microbatches if plan.pipeline else None,
                 reshard_after_forward=self.reshard(plan), global_batch=plan.global_batch)
        return d

    # -- argv round trip ---------------------------------------------------------------------------------------
    def to_argv(self, exclude: tuple[str, ...] = ()) -> list[str]:
        """Every option that is not None, as the flags `from_argv` reads back (`exclude`: field names left out)."""
        argv = []
        for o in cli_options(type(self)):
            value = getattr(self, o.name)
            if value is None or o.name in exclude:
                continue
            if o.kind == "tristate":
                argv.append(o.flag if value else o.negative)
            elif o.kind == "flag":
                argv += [o.flag] if value else []
            else:
                argv += [o.flag, str(value)]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str] | None) -> RunOptions:
        p = argparse.ArgumentParser(prog="python -m llmdiag.workloads.train",
                                    description="One rank of an llmdiag workload (start it under torchrun).")
        for o in cli_options(cls):
            if o.kind == "flag":
                p.add_argument(o.flag, dest=o.name, action="store_true", help=o.help)
            elif o.kind == "tristate":
                p.add_argument(o.flag, dest=o.name, action="store_true", default=None, help=o.help)
                p.add_argument(o.negative, dest=o.name, action="store_false")
            else:
                p.add_argument(o.flag, dest=o.name, type=o.type, choices=o.choices, default=o.default,
                               required=o.required or o.argv_required, help=o.help)
        return cls(**vars(p.parse_args(argv)))


@dataclass
class LaunchOptions:
    """How `llmdiag run` starts this node's ranks; the ranks never see these."""

    timeout: float = opt(600.0, "Seconds before a run that does not finish is stopped.")
    nproc_per_node: int | None = opt(None, "Ranks per node.", shown="GPUs per node, or all ranks on CPU")
    nnodes: int = opt(1, "Number of nodes (multi-node: run once per node).")
    node_rank: int = opt(0, "This node's index (multi-node).")
    rdzv_endpoint: str | None = opt(None, "host:port of node 0 (multi-node).")
    print_slurm: bool = opt(False, "Print an sbatch script for this run and exit.")
    inject_fault: str | None = opt(None, "Test hook: rank:<R>:raise|kill|hang[:<step>].", hidden=True)

    def check(self, opts: RunOptions) -> None:
        """Everything that can be refused before torch is imported or a process starts."""
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise WorkloadError(f"--node-rank {self.node_rank} must lie in 0..{self.nnodes - 1}")
        if self.nnodes > 1 and not self.rdzv_endpoint and not self.print_slurm:
            raise WorkloadError("--nnodes > 1 needs --rdzv-endpoint host:port (node 0's address)")
        if self.timeout <= 0:
            raise WorkloadError(f"--timeout must be > 0, got {self.timeout}")
        # --print-slurm picks the node count itself; otherwise ranks per node x nodes must be the world size.
        per_node = self.nproc_per_node
        available = per_node * self.nnodes if per_node and not self.print_slurm else None
        plan = opts.plan(ranks_available=available, ranks_reason=f"{self.nnodes} node(s) x {per_node} per node")
        opts.total_steps()
        faults.parse(self.inject_fault, plan.layout.world_size)
        slow.parse(opts.inject_slow, plan.layout.world_size)
