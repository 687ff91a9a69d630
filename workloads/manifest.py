"""manifest.json: what `analyze` cannot read from a trace (layout, schedule, FLOPs, who failed). Torch-free.

Keys follow docs/run-folder.md exactly. Written atomically at start (status `running`) and again at the
end, when every rank's result record has been merged into `rank_status`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict

from llmdiag.workloads.options import RunPlan
from llmdiag.workloads.rankio import atomic_write_json

SCHEMA_VERSION = 1

# Dense bf16 peak of one device, FLOP/s, matched by substring of the device name (first match wins).
PEAK_BF16 = [
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989.4e12), ("H200", 989.4e12), ("H800", 989.4e12),
    ("GH200", 989.4e12), ("B200", 2250e12), ("B100", 1750e12), ("A100", 312e12), ("A800", 312e12),
    ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12), ("A10G", 70e12), ("A10", 125e12), ("V100", 125e12),
    ("MI300X", 1307e12), ("MI250X", 383e12), ("MI250", 362e12),
]


def peak_flops(device_name: str) -> float | None:
    for key, value in PEAK_BF16:
        if key in device_name:
            return value
    return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            if m:
                return m.group(1).strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _version() -> str:
    """llmdiag's version, declared once in the top package (which imports neither half)."""
    from llmdiag import __version__

    return __version__


def build(run: RunPlan, *, device: dict, torch_version: str, command: list[str], cpu_cores: int,
          oversubscribed: bool, launch: dict, started_at: str) -> dict:
    plan, opts = run.plan, run.options
    wait, warmup, active = run.profile
    lay = plan.layout
    ranks = {}
    for r in range(lay.world_size):
        entry = dict(lay.coords(r))
        entry["stages"] = plan.stages_of(r) if plan.pipeline else []
        entry["host"] = None
        ranks[str(r)] = entry
    cuda = device["type"] == "cuda"
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": plan.workload,
        "layout": lay.as_dict(),
        "world_size": lay.world_size,
        "mesh_dim_names": lay.mesh_dims,
        "ranks": ranks,
        "pipeline": plan.pipeline.manifest() if plan.pipeline else None,
        "model": plan.model.manifest(),
        "batch": {"global_batch": plan.global_batch, "local_batch": plan.local_batch,
                  "micro_batch": plan.micro_batch, "seq_len": plan.model.seq_len},
        "tokens_per_step": plan.tokens_per_step,
        "model_flops_per_step": plan.model_flops_per_step,
        "backend": "nccl" if cuda else "gloo",
        "device": device,
        "dtype": "bfloat16" if cuda else "float32",
        "torch_version": torch_version,
        "llmdiag_version": _version(),
        "profiler": {"wait": wait, "warmup": warmup, "active": active, "record_shapes": True,
                     "profile_memory": True, "with_stack": opts.with_stack},
        "steps": run.steps,
        "options": _options(run),
        "command": command,
        "cpu_cores": cpu_cores,
        "oversubscribed": oversubscribed,
        "launch": launch,
        "rank_status": {},
        "status": "running",
        "failure": None,
        "started_at": started_at,
        "finished_at": None,
    }


def _options(run: RunPlan) -> dict:
    """The options as given, with what the plan decided for those left to it (schedule, microbatches,
    reshard, global batch, experts under epN); the run folder is the manifest's own location, so it is left out."""
    plan = run.plan
    d = asdict(run.options)
    d.pop("out")
    d.update(schedule=plan.pipeline.schedule if plan.pipeline else None,
             microbatches=plan.pipeline.microbatches if plan.pipeline else None,
             reshard_after_forward=run.reshard_after_forward, global_batch=plan.global_batch,
             moe_experts=plan.model.moe_experts)
    return d


def read_results(out_dir: str, world_size: int) -> dict[int, dict]:
    """Every results/rank<R>.json that exists and parses."""
    found = {}
    for r in range(world_size):
        try:
            with open(os.path.join(out_dir, "results", f"rank{r}.json")) as f:
                found[r] = json.load(f)
        except (OSError, ValueError):
            pass
    return found


def write(out_dir: str, manifest: dict) -> None:
    atomic_write_json(os.path.join(out_dir, "manifest.json"), manifest)
