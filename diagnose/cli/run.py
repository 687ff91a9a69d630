"""`llmdiag run`: the click command. Validates everything torch-free, then hands over to workloads.launch.

A bad workload string or a layout the model cannot take raises LlmdiagError here, which the group turns
into one line and exit 2, before torch is even imported.
"""

from __future__ import annotations

import sys

import click

from workloads.grammar import SCHEDULES


@click.command("run", context_settings={"show_default": True})
@click.option("--workload", "-w", required=True,
              help="Parallel layout: any concatenation of dpN fsdpN tpN ppN cpN (tp2pp2, dp2tp2pp2, fsdp8), or single.")
@click.option("--model", default="tiny", help="Model size: tiny (CPU default), 125m, 1b, 8b.")
@click.option("--layers", type=int, help="Override the number of decoder layers.")
@click.option("--hidden", type=int, help="Override the hidden size (SwiGLU width follows).")
@click.option("--seq-len", type=int, help="Override the sequence length.")
@click.option("--batch", type=int, help="Global batch in sequences (default: the size's, rounded to divide).")
@click.option("--schedule", type=click.Choice(SCHEDULES), help="Pipeline schedule (pp only). [default: 1f1b]")
@click.option("--microbatches", type=int, help="Pipeline microbatches per step (pp only). [default: 2 x pp]")
@click.option("--steps", type=int, help="Total optimizer steps. [default: profiled steps + 3 unprofiled]")
@click.option("--profile-steps", default="1,1,3", help="Profiler schedule WAIT,WARMUP,ACTIVE.")
@click.option("--out", default=None, help="Run folder. [default: runs/<workload>-<YYYYmmdd-HHMMSS>]")
@click.option("--timeout", type=float, default=600.0, help="Seconds before a run that does not finish is stopped.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              help="cuda (NCCL, one GPU per rank) when available, else cpu (gloo).")
@click.option("--nproc-per-node", type=int, help="Ranks per node. [default: GPUs per node, or all ranks on CPU]")
@click.option("--nnodes", type=int, default=1, help="Number of nodes (multi-node: run once per node).")
@click.option("--node-rank", type=int, default=0, help="This node's index (multi-node).")
@click.option("--rdzv-endpoint", help="host:port of node 0 (multi-node).")
@click.option("--print-slurm", is_flag=True, help="Print an sbatch script for this run and exit.")
@click.option("--sp", is_flag=True, help="Sequence parallel with tp.")
@click.option("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size.")
@click.option("--reshard-after-forward/--no-reshard-after-forward", default=None,
              help="FSDP: free gathered weights after forward. [default: on, off under pp]")
@click.option("--ac", is_flag=True, help="Activation checkpointing per decoder block.")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the traces (larger, slower).")
@click.option("--seed", type=int, default=0, help="Seed for weights and data.")
@click.option("--lr", type=float, default=1e-3, help="AdamW learning rate.")
@click.option("--inject-fault", hidden=True, help="Test hook: rank:<R>:raise|kill|hang[:<step>].")
def run(workload, model, layers, hidden, seq_len, batch, schedule, microbatches, steps, profile_steps, out, timeout,
        device, nproc_per_node, nnodes, node_rank, rdzv_endpoint, print_slurm, sp, bucket_cap_mb,
        reshard_after_forward, ac, with_stack, seed, lr, inject_fault):
    """Run a parallel layout as a profiled training workload; write a run folder."""
    from diagnose.errors import LlmdiagError
    from workloads import faults
    from workloads.options import RunOptions

    opts = RunOptions(workload=workload, out=out or "", model=model, layers=layers, hidden=hidden, seq_len=seq_len,
                      batch=batch, schedule=schedule, microbatches=microbatches, steps=steps,
                      profile_steps=profile_steps, sp=sp, bucket_cap_mb=bucket_cap_mb,
                      reshard_after_forward=reshard_after_forward, ac=ac, with_stack=with_stack, seed=seed, lr=lr,
                      device=device)
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise LlmdiagError(f"--node-rank {node_rank} must lie in 0..{nnodes - 1}")
    if nnodes > 1 and not rdzv_endpoint and not print_slurm:
        raise LlmdiagError("--nnodes > 1 needs --rdzv-endpoint host:port (node 0's address)")
    if timeout <= 0:
        raise LlmdiagError(f"--timeout must be > 0, got {timeout}")
    # --print-slurm picks the node count itself; otherwise ranks per node x nodes must be the world size.
    available = nproc_per_node * nnodes if nproc_per_node and not print_slurm else None
    opts.plan(ranks_available=available, ranks_reason=f"{nnodes} node(s) x {nproc_per_node} per node")
    opts.total_steps()
    faults.parse(inject_fault)

    if print_slurm:
        from workloads.slurm import sbatch_script

        click.echo(sbatch_script(opts, nproc_per_node=nproc_per_node or 8, timeout=timeout), nl=False)
        return

    from workloads.launch import launch

    rc = launch(opts, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                nproc_per_node=nproc_per_node, timeout=timeout, fault=inject_fault,
                command=["llmdiag", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("llmdiag") else sys.argv,
                echo=click.echo, echo_err=lambda s: click.echo(s, err=True))
    if rc:
        sys.exit(rc)
