"""The options of one run, shared by `llmdiag run` (launcher) and `python -m workloads.train` (every rank).

Torch-free. The launcher turns RunOptions into argv for torchrun; each rank parses the same argv back and calls
`plan()`, so both sides derive the same Plan from the same text.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields

from diagnose.errors import LlmdiagError
from workloads.config import model_config
from workloads.grammar import Plan, resolve

DEFAULT_TAIL_STEPS = 3  # unprofiled steps after the profiler stops, to measure its overhead


@dataclass
class RunOptions:
    workload: str
    out: str = ""
    model: str = "tiny"
    layers: int | None = None
    hidden: int | None = None
    seq_len: int | None = None
    batch: int | None = None
    schedule: str | None = None
    microbatches: int | None = None
    steps: int | None = None
    profile_steps: str = "1,1,3"
    sp: bool = False
    bucket_cap_mb: float = 25.0
    reshard_after_forward: bool | None = None
    ac: bool = False
    with_stack: bool = False
    seed: int = 0
    lr: float = 1e-3
    device: str = "cpu"

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
            raise LlmdiagError(f"--profile-steps {self.profile_steps!r}: expected WAIT,WARMUP,ACTIVE with ACTIVE >= 1",
                               hint="e.g. 1,1,3")
        return parts[0], parts[1], parts[2]

    def total_steps(self) -> int:
        profiled = sum(self.profile())
        steps = self.steps if self.steps is not None else profiled + DEFAULT_TAIL_STEPS
        if steps < profiled:
            raise LlmdiagError(f"--steps {steps} is fewer than the {profiled} steps of --profile-steps "
                               f"{self.profile_steps}")
        return steps

    def plan(self, ranks_available: int | None = None, ranks_reason: str = "") -> Plan:
        cfg = model_config(self.model, layers=self.layers, hidden=self.hidden, seq_len=self.seq_len,
                           batch=self.batch)
        return resolve(self.workload, cfg, schedule=self.schedule, microbatches=self.microbatches,
                       batch_given=self.batch is not None, sp=self.sp, ranks_available=ranks_available,
                       ranks_reason=ranks_reason)

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
    def to_argv(self) -> list[str]:
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if value is None:
                continue
            if f.name == "reshard_after_forward":
                argv.append(flag if value else "--no-reshard-after-forward")
            elif isinstance(value, bool):
                if value:
                    argv.append(flag)
            else:
                argv += [flag, str(value)]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str] | None) -> RunOptions:
        p = argparse.ArgumentParser(prog="python -m workloads.train",
                                    description="One rank of an llmdiag workload (start it under torchrun).")
        p.add_argument("--workload", required=True)
        p.add_argument("--out", required=True)
        for name in ("model", "schedule", "profile-steps", "device"):
            p.add_argument("--" + name)
        for name in ("layers", "hidden", "seq-len", "batch", "microbatches", "steps", "seed"):
            p.add_argument("--" + name, type=int)
        for name in ("bucket-cap-mb", "lr"):
            p.add_argument("--" + name, type=float)
        for name in ("sp", "ac", "with-stack"):
            p.add_argument("--" + name, action="store_true")
        p.add_argument("--reshard-after-forward", dest="reshard_after_forward", action="store_true", default=None)
        p.add_argument("--no-reshard-after-forward", dest="reshard_after_forward", action="store_false")
        ns = vars(p.parse_args(argv))
        defaults = cls(workload="")
        return cls(**{k: (v if v is not None else getattr(defaults, k)) for k, v in ns.items()})
