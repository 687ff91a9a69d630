"""`llmdiag run --print-slurm`: an sbatch script that runs the same workload across nodes. Torch-free.

One `llmdiag run` per node (srun, one task per node), each starting torchrun for its node's GPUs with a
static rendezvous on the first node; node ranks come from SLURM_NODEID, so global rank = node x GPUs + local.
Every node writes into one shared run folder; node 0 writes the manifest.
"""

from __future__ import annotations

import math
import shlex

from llmdiag.workloads.errors import WorkloadError
from llmdiag.workloads.options import LaunchOptions, RunPlan
from llmdiag.workloads.optspec import to_argv

GPUS_PER_NODE = 8  # without --nproc-per-node
_NOT_FORWARDED = ("out", "device")  # the script sets its own


def sbatch_script(run: RunPlan, lo: LaunchOptions) -> str:
    opts, world = run.options, run.plan.layout.world_size
    gpn = min(lo.nproc_per_node or GPUS_PER_NODE, world)
    timeout = lo.timeout
    if world % gpn:  # every node runs gpn ranks: a remainder would make each node's plan refuse the world size
        raise WorkloadError(f"--print-slurm: {opts.workload} needs {world} ranks, which nodes of {gpn} do not divide",
                            hint="pass --nproc-per-node with a divisor of the world size")
    nodes = world // gpn
    minutes = math.ceil(timeout / 60) + 10
    args = " ".join(shlex.quote(a) for a in to_argv(opts, exclude=_NOT_FORWARDED))
    return f"""#!/bin/bash
# llmdiag: {opts.workload} on {nodes} node(s) x {gpn} GPU(s). Submit with: sbatch this-file.sbatch
#SBATCH --job-name=llmdiag-{opts.workload}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpn}
#SBATCH --exclusive
#SBATCH --time={minutes // 60:02d}:{minutes % 60:02d}:00
#SBATCH --output=llmdiag-%x-%j.out
set -euo pipefail

# Make `llmdiag` available on every node, e.g.: source /path/to/llmdiag/.venv/bin/activate
# The run folder must be on a filesystem that every node sees.
OUT=${{LLMDIAG_OUT:-$PWD/runs/{opts.workload}-$SLURM_JOB_ID}}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=${{LLMDIAG_PORT:-29500}}
mkdir -p "$OUT"

# $SLURM_NODEID is escaped so that each node expands its own.
srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c "exec llmdiag run {args} \\
  --device cuda --nproc-per-node {gpn} --nnodes {nodes} --node-rank \\$SLURM_NODEID \\
  --rdzv-endpoint $HEAD:$PORT --timeout {timeout:.0f} --out \\"$OUT\\""
"""
