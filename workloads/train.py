"""The training loop every rank runs under torchrun: `python -m llmdiag.workloads.train --workload tp2pp2 --out DIR`.

One loop for every layout. torch.profiler records steps wait..wait+warmup+active (shapes and memory on,
stacks optional) and writes one gzipped Kineto trace per rank; a few unprofiled steps follow so the result
record can state the profiler's own cost per step. Phases carry `llmdiag/forward|backward|optimizer` labels
(pipeline runs: `PP:` action labels, see workloads.parallel.pp). Exit: result record first, then barrier ->
destroy_process_group -> gc -> os._exit, because a gloo worker thread can abort an otherwise finished process
at interpreter exit (`terminate called without an active exception`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import sys
import time
import traceback
from dataclasses import replace

from llmdiag.workloads import slow
from llmdiag.workloads.faults import Fault
from llmdiag.workloads.options import RunOptions, prepare
from llmdiag.workloads.rankio import ResultRecord, redirect_output


class Trainer:
    """One rank. `setup` derives the run's plan once from the options the launcher wrote (the same text, so the
    same RunPlan as the launcher's); everything after reads `self.runplan` and never derives it again."""

    def __init__(self, opts: RunOptions, rank: int, world: int, local_rank: int, record: ResultRecord,
                 progress_fd: int):
        self.opts, self.rank, self.world, self.local_rank = opts, rank, world, local_rank
        self.record, self.progress_fd = record, progress_fd

    def say(self, text: str) -> None:
        print(text, flush=True)
        if self.rank == 0:
            os.write(self.progress_fd, f"[llmdiag] {text}\n".encode())

    def setup(self) -> None:
        import torch

        from llmdiag.workloads.launch import resolve_device
        from llmdiag.workloads.model import loss_fn
        from llmdiag.workloads.parallel import build_local_modules
        from llmdiag.workloads.parallel.mesh import build_mesh, init_distributed

        # `llmdiag run` passes cpu|cuda; by hand it may be auto
        self.runplan = run = prepare(replace(self.opts, device=resolve_device(self.opts.device)[0]))
        self.opts, self.plan = opts, plan = run.options, run.plan
        if plan.layout.world_size != self.world:
            raise RuntimeError(f"workload {opts.workload} needs {plan.layout.world_size} ranks, torchrun started "
                               f"{self.world}")
        cuda = opts.device == "cuda"
        self.device = torch.device("cuda", self.local_rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        self.compute_dtype = torch.bfloat16 if cuda else torch.float32
        init_distributed(self.device)
        self.mesh = build_mesh(plan.layout, self.device)
        self.coords = plan.layout.coords(self.rank)
        self.stage_ids = plan.stages_of(self.rank)
        self.record.update(coords=self.coords, stages=self.stage_ids if plan.pipeline else [])
        torch.manual_seed(opts.seed)
        self.modules = build_local_modules(run, self.mesh, self.rank, self.device, self.compute_dtype)
        params = [p for m in self.modules.values() for p in m.parameters()]
        # foreach kernels cannot mix DTensor and plain tensor parameters (TP without --sp leaves norms plain).
        if opts.zero == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            # ZeRO-1: each dp rank keeps and updates the AdamW state of its share, then broadcasts the weights.
            self.optimizer = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW,
                                                     process_group=self.mesh.group("dp"), lr=opts.lr,
                                                     weight_decay=0.0, foreach=True)
        else:
            # Under EP with FSDP the experts stay plain tensors beside FSDP's DTensors: same restriction.
            plain = plan.layout.tp > 1 or (plan.layout.ep > 1 and plan.layout.fsdp > 1)
            self.optimizer = torch.optim.AdamW(params, lr=opts.lr, weight_decay=0.0, foreach=not plain)
        from llmdiag.workloads.moe import moe_modules

        for m in self.modules.values():
            for moe in moe_modules(m):
                moe.aux_scale = 1.0 / plan.grad_accum
        self.schedule = None
        if plan.pipeline:
            from llmdiag.workloads.parallel.pp import build_schedule

            self.schedule, _ = build_schedule(plan.pipeline, self.modules, self.mesh.group("pp"), self.device,
                                              loss_fn)
        self.loss_fn = loss_fn
        self.is_first = not plan.pipeline or 0 in self.stage_ids
        self.is_last = not plan.pipeline or plan.pipeline.stages - 1 in self.stage_ids

    def batch(self, step: int):
        from llmdiag.workloads.data import local_batch

        lay, c = self.plan.layout, self.coords
        inputs, targets = local_batch(step, batch=self.plan.global_batch, seq_len=self.plan.model.seq_len,
                                      vocab=self.plan.model.vocab, seed=self.opts.seed,
                                      replica=c["dp"] * lay.fsdp + c["fsdp"], replicas=lay.dp * lay.fsdp,
                                      cp_rank=c["cp"], cp=lay.cp)
        return inputs.to(self.device), targets.to(self.device)

    def train_step(self, inputs, targets):
        """One optimizer step; returns this rank's loss tensor (None on pipeline stages without the loss)."""
        import torch
        from torch.profiler import record_function

        autocast = (torch.autocast("cuda", dtype=self.compute_dtype) if self.device.type == "cuda"
                    else contextlib.nullcontext())
        loss = None
        if self.schedule is None:
            model, n = self.modules[0], self.plan.grad_accum
            total = 0.0
            keep = self.opts.accum_keep_gathered and hasattr(model, "set_reshard_after_backward")
            for i, (x, y) in enumerate(zip(inputs.chunk(n), targets.chunk(n))):
                if keep:  # FSDP2: gather in the first microstep's forward, reshard after the last backward only
                    model.set_reshard_after_forward(False)
                    model.set_reshard_after_backward(i == n - 1)
                with _grad_sync(model, i == n - 1), autocast:
                    with record_function("llmdiag/forward"), slow.compute("forward", self.device):
                        loss = self.loss_fn(model(x), y) / n
                    with record_function("llmdiag/backward"), slow.compute("backward", self.device):
                        loss.backward()
                total = total + loss.detach()
            loss = total
        else:
            losses: list = []
            args = (inputs,) if self.is_first else ()
            kw = {"target": targets, "losses": losses} if self.is_last else {}
            with autocast:
                self.schedule.step(*args, **kw)
            if self.is_last:
                loss = torch.stack([x.detach().float() for x in losses]).mean()
        if self.plan.layout.ep > 1:
            from llmdiag.workloads.parallel.ep import reduce_expert_grads

            with record_function("llmdiag/moe/expert_grad_sync"):
                lay = self.plan.layout
                reduce_expert_grads(self.modules.values(), lay.dp * lay.fsdp, self.mesh.edp_group)
        with record_function("llmdiag/optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return None if loss is None else loss.detach()

    def run(self) -> None:
        import torch

        from llmdiag.workloads.profiling import make_profiler

        t_setup = time.perf_counter()
        self.setup()
        opts, run = self.opts, self.runplan
        wait, warmup, active = run.profile
        profiled, total = wait + warmup + active, run.steps
        fault = Fault(self.rank, default_step=min(profiled, total - 1))
        slow.install(self.rank, self.opts.inject_slow)
        self.say(f"rank {self.rank}/{self.world} ready in {time.perf_counter() - t_setup:.1f}s: "
                 f"{opts.workload}, {total} steps (profiling {wait},{warmup},{active})")
        trace_rel = os.path.join("traces", f"rank{self.rank}.pt.trace.json.gz")
        prof = make_profiler(run, os.path.join(opts.out, trace_rel), self.device)
        prof.start()
        losses, times = [], []
        t_start = time.perf_counter()
        for step in range(total):
            fault.maybe_fire(step)
            inputs, targets = self.batch(step)
            t0 = time.perf_counter()
            loss = self.train_step(inputs, targets)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(loss)
            if step < profiled:
                prof.step()
                if step == profiled - 1:
                    prof.stop()
                    self.record.update(trace=trace_rel)
            self.record.update(last_step=step)
            self.say(f"step {step + 1}/{total} ({time.perf_counter() - t_start:.1f}s, {times[-1]:.0f} ms)")
        self.finish(losses, times, wait + warmup, active)

    def finish(self, losses, times, first_active: int, active: int) -> None:
        """Average the loss over the ranks that hold one (one collective, after the measured steps)."""
        import torch
        import torch.distributed as dist

        local = [None if x is None else float(x) for x in losses]
        n = len(losses)
        vec = torch.zeros(n + 1, dtype=torch.float64)
        if self.is_last:
            vec[:n] = torch.tensor(local, dtype=torch.float64)
            vec[n] = 1.0
        vec = vec.to(self.device)
        dist.all_reduce(vec)
        vec = vec.cpu()
        mean = lambda xs: round(sum(xs) / len(xs), 3) if xs else None
        tail = times[first_active + active:]
        self.record.update(
            losses=[float(v) for v in (vec[:n] / vec[n])],
            local_losses=local if self.is_last else None,
            step_times_ms=[round(t, 3) for t in times],
            profiled_step_ms=mean(times[first_active:first_active + active]),
            unprofiled_step_ms=mean(tail),
            peak_memory_bytes=_peak_memory(self.device),
        )


def _grad_sync(model, sync: bool):
    """Gradient accumulation: skip the data-parallel reduction on all but the last microstep.

    DDP: `no_sync()`; FSDP2 / replicate: `set_requires_gradient_sync(False)` (FSDP2 still reduce-scatters
    nothing and keeps unsharded gradients until the last microstep).
    """
    if hasattr(model, "no_sync"):
        return contextlib.nullcontext() if sync else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()


def _peak_memory(device) -> int:
    import resource

    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _summary(e: BaseException) -> str:
    """One line naming the innermost cause (torch's pipelining wraps the real error in an empty-looking one)."""
    while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
        e = e.__cause__ or e.__context__
    lines = [ln.strip() for ln in traceback.format_exception_only(type(e), e) if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def _exit_cleanly(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 0:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.barrier()
                dist.destroy_process_group()
        except Exception:  # the record already says ok; never turn a finished run into a crash
            traceback.print_exc()
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    opts = RunOptions.from_argv(argv)
    progress_fd = redirect_output(opts.out, rank)
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the launcher asks for stacks before killing a hang
    record = ResultRecord(opts.out, rank, world, local_rank)
    try:
        Trainer(opts, rank, world, local_rank, record, progress_fd).run()
        record.finish("ok")
    except BaseException as e:  # any failure is recorded, then this rank exits 1
        traceback.print_exc()
        record.finish("failed", _summary(e) + "\n" + traceback.format_exc()[-4000:])
        _exit_cleanly(1)
    _exit_cleanly(0)


if __name__ == "__main__":
    main()
