"""The options of one run, declared once, and the RunPlan derived from them once.

RunOptions is what reaches the ranks: the launcher writes it as argv for torchrun (optspec.to_argv), each rank
reads it back (`RunOptions.from_argv`). LaunchOptions is what only the launcher needs (timeout, nodes,
rendezvous). Every field carries its default, help, choices and flag spelling (optspec.opt), read by the
click command (diagnose/cli/run.py) and the ranks' argparse, so no default or help text is written twice.

`prepare` derives everything a run implies (the Plan, profiler schedule, step count, FSDP reshard) in one call:
`llmdiag run` calls it once before launching and each rank once at its start, from the same text, so both
sides hold the same RunPlan and nothing downstream comes back here to recompute it. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmdiag.workloads import faults, slow
from llmdiag.workloads.config import SIZES, model_config
from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.grammar import DEFAULT_SCHEDULE, SCHEDULES, Plan, parse_workload, resolve
from llmdiag.workloads.optspec import from_argv, opt

DEFAULT_TAIL_STEPS = 3  # unprofiled steps after the profiler stops, to measure its overhead
DEVICES = ("auto", "cpu", "cuda")
# `ep2` without --moe-experts: 2 experts per expert-parallel rank, so ep divides them and top-2 routing fits.
EXPERTS_PER_EP_RANK = 2


@dataclass(frozen=True)
class RunOptions:
    """What reaches the ranks (as argv); frozen: a value decided later (the device, the run folder) is a
    `dataclasses.replace`, never an assignment to a shared object."""

    workload: str = opt(help="Parallel layout: any concatenation of dpN fsdpN tpN ppN cpN epN (tp2pp2, dp2tp2pp2, "
                             "fsdp8, dp4ep2), or single. epN: expert parallelism over N of the dp x fsdp ranks "
                             "(ep2 alone is dp2ep2; a MoE model, see --moe-experts).", short="-w")
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
    moe_experts: int = opt(0, "Mixture of experts: experts per MoE layer (0: dense SwiGLU, except under epN, "
                              f"where 0 means {EXPERTS_PER_EP_RANK} experts per ep rank).")
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

    # -- derived (by `prepare`, once per process) ---------------------------------------------------------------
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

    def experts(self) -> int:
        """--moe-experts, or under epN with none given EXPERTS_PER_EP_RANK x ep (an ep layout needs a MoE
        model: refusing `ep2` for want of a number the user has no reason to pick helped nobody)."""
        if self.moe_experts:
            return self.moe_experts
        ep = parse_workload(self.workload).ep
        return EXPERTS_PER_EP_RANK * ep if ep > 1 else 0

    def plan(self, ranks_available: int | None = None, ranks_reason: str = "") -> Plan:
        cfg = model_config(self.model, layers=self.layers, hidden=self.hidden, seq_len=self.seq_len,
                           batch=self.batch, moe_experts=self.experts(), moe_topk=self.moe_topk,
                           moe_every=self.moe_every, moe_capacity=self.moe_capacity,
                           moe_route_skew=self.moe_route_skew, moe_aux_weight=self.moe_aux_weight)
        plan = resolve(self.workload, cfg, schedule=self.schedule, microbatches=self.microbatches,
                       batch_given=self.batch is not None, sp=self.sp, ranks_available=ranks_available,
                       ranks_reason=ranks_reason, grad_accum=self.grad_accum, zero=self.zero)
        if self.accum_keep_gathered and (plan.grad_accum < 2 or plan.layout.fsdp < 2):
            raise WorkloadError("--accum-keep-gathered needs fsdpN and --grad-accum >= 2",
                                hint="e.g. fsdp2 --grad-accum 4 --accum-keep-gathered")
        return plan

    @classmethod
    def from_argv(cls, argv: list[str] | None) -> RunOptions:
        return from_argv(cls, argv, prog="python -m llmdiag.workloads.train",
                         description="One rank of an llmdiag workload (start it under torchrun).")


@dataclass(frozen=True)
class LaunchOptions:
    """How `llmdiag run` starts this node's ranks; the ranks never see these."""

    timeout: float = opt(600.0, "Seconds before a run that does not finish is stopped.")
    nproc_per_node: int | None = opt(None, "Ranks per node.", shown="GPUs per node, or all ranks on CPU")
    nnodes: int = opt(1, "Number of nodes (multi-node: run once per node).")
    node_rank: int = opt(0, "This node's index (multi-node).")
    rdzv_endpoint: str | None = opt(None, "host:port of node 0 (multi-node).")
    print_slurm: bool = opt(False, "Print an sbatch script for this run and exit.")
    inject_fault: str | None = opt(None, "Test hook: rank:<R>:raise|kill|hang[:<step>].", hidden=True)


@dataclass(frozen=True)
class RunPlan:
    """One run as the launcher and every rank hold it: its options and all they imply, derived once.

    Downstream code (launch, slurm, manifest, train, profiling, parallel) reads these fields and never calls
    back into RunOptions to recompute them. `options` may later be replaced with its resolved device and run
    folder (`dataclasses.replace`); nothing here depends on either.
    """

    options: RunOptions
    plan: Plan
    profile: tuple[int, int, int]  # profiler schedule (wait, warmup, active)
    steps: int  # total optimizer steps: profiled + unprofiled tail
    reshard_after_forward: bool  # FSDP: torchtitan's default, off under PP (it would re-gather per microbatch)


def prepare(opts: RunOptions, lo: LaunchOptions | None = None) -> RunPlan:
    """The RunPlan of `opts`: the one call to `plan()`, and everything refused before torch is imported or a
    process starts. `lo` (the launcher's options; None in a rank) adds what only the launcher checks: nodes,
    timeout, ranks per node x nodes against the world size, fault and straggler specs."""
    available, reason = None, ""
    if lo is not None:
        if lo.nnodes < 1 or not 0 <= lo.node_rank < lo.nnodes:
            raise WorkloadError(f"--node-rank {lo.node_rank} must lie in 0..{lo.nnodes - 1}")
        if lo.nnodes > 1 and not lo.rdzv_endpoint and not lo.print_slurm:
            raise WorkloadError("--nnodes > 1 needs --rdzv-endpoint host:port (node 0's address)")
        if lo.timeout <= 0:
            raise WorkloadError(f"--timeout must be > 0, got {lo.timeout}")
        # --print-slurm picks the node count itself; otherwise ranks per node x nodes must be the world size.
        per_node = lo.nproc_per_node
        available = per_node * lo.nnodes if per_node and not lo.print_slurm else None
        reason = f"{lo.nnodes} node(s) x {per_node} per node"
    plan = opts.plan(ranks_available=available, ranks_reason=reason)
    steps = opts.total_steps()
    if lo is not None:
        faults.parse(lo.inject_fault, plan.layout.world_size)
        slow.parse(opts.inject_slow, plan.layout.world_size)
    reshard = opts.reshard_after_forward if opts.reshard_after_forward is not None else plan.pipeline is None
    return RunPlan(opts, plan, opts.profile(), steps, reshard)
