"""Pipeline parallelism with `torch.distributed.pipelining`: manual split, PipelineStage, torch's schedules.

The model is split by hand (each stage is a `Transformer` holding a contiguous run of layers; see
`Pipeline.layers_of`), because tracing (`pipeline()`) would rename modules and hide the ModuleDict keys.
Stages map onto pp ranks looped (gpipe, 1f1b, interleaved1f1b) or in a V (zbv, dualpipev), as torch maps them.

Labels: every stage's compute is wrapped in `PP:{stage}{F|I|B|W}{mb}`, the names torch's runtime schedules
(interleaved1f1b, zbv, dualpipev) give their actions. Those runtime spans also cover the wait for the
action's input (and dualpipev pairs two actions in one `PP:(…)OVERLAP_F_B` span), so our label nested
inside is the compute alone; the analyzer keeps the innermost of nested equal labels (diagnose/pipeline.py).
`ScheduleGPipe` only emits `Forward i`/`Backward i` and `Schedule1F1B` nothing: there ours are the only ones.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleDualPipeV,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleZBVZeroBubble,
)
from torch.profiler import record_function

from llmdiag.workloads import slow
from llmdiag.workloads.grammar import Pipeline

SCHEDULE_CLASSES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved1f1b": ScheduleInterleaved1F1B,
    "zbv": ScheduleZBVZeroBubble,
    "dualpipev": ScheduleDualPipeV,
}


def _label_actions(stage: PipelineStage) -> None:
    """Wrap the stage's compute in `PP:` action labels (see the module doc)."""
    fwd, bwd, wgt = stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk

    @functools.wraps(fwd)
    def forward_one_chunk(fwd_chunk_id, *args, **kwargs):
        with record_function(f"PP:{stage.stage_index}F{fwd_chunk_id}"), slow.compute("forward", stage.device):
            return fwd(fwd_chunk_id, *args, **kwargs)

    @functools.wraps(bwd)
    def backward_one_chunk(bwd_chunk_id, *args, **kwargs):
        full = kwargs.get("full_backward", args[1] if len(args) > 1 else True)  # (loss, full_backward, ...)
        kind = "B" if full else "I"  # input-only backward: zero-bubble's I
        with record_function(f"PP:{stage.stage_index}{kind}{bwd_chunk_id}"), slow.compute("backward", stage.device):
            return bwd(bwd_chunk_id, *args, **kwargs)

    @functools.wraps(wgt)
    def backward_weight_one_chunk(bwd_chunk_id, *args, **kwargs):
        with record_function(f"PP:{stage.stage_index}W{bwd_chunk_id}"), slow.compute("backward", stage.device):
            return wgt(bwd_chunk_id, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk


def build_schedule(pipeline: Pipeline, modules: dict[int, nn.Module], pp_group: dist.ProcessGroup,
                   device: torch.device, loss_fn):
    """PipelineStage per local stage (ascending stage index) and the schedule that drives them."""
    stages = [PipelineStage(mod, s, pipeline.stages, device, group=pp_group) for s, mod in sorted(modules.items())]
    cls = SCHEDULE_CLASSES[pipeline.schedule]
    for st in stages:
        _label_actions(st)
    if pipeline.stages_per_rank == 1:
        return cls(stages[0], n_microbatches=pipeline.microbatches, loss_fn=loss_fn), stages
    return cls(stages, n_microbatches=pipeline.microbatches, loss_fn=loss_fn), stages
