"""The single-process baseline: the whole model, the whole global batch, one process, no torchrun.

Every parallel layout must reproduce these losses step for step (within float tolerance): same weights
(per-parameter seeds), same tokens (data.global_batch), same AdamW. Used by the tests; also handy by hand:
`python -m llmdiag.workloads.reference --workload tp2pp2 --steps 3`.
"""

from __future__ import annotations

import sys

import torch

from llmdiag.workloads.data import global_batch
from llmdiag.workloads.model import loss_fn, reference_model
from llmdiag.workloads.options import RunOptions


def reference_losses(opts: RunOptions, steps: int) -> list[float]:
    plan = opts.plan()
    cfg = plan.model
    model = reference_model(cfg, seed=opts.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts.lr, weight_decay=0.0, foreach=True)
    losses = []
    for step in range(steps):
        tokens = global_batch(step, plan.global_batch, cfg.seq_len, cfg.vocab, opts.seed)
        loss = loss_fn(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--out" not in argv:
        argv += ["--out", "-"]
    o = RunOptions.from_argv(argv)
    print(" ".join(f"{x:.6f}" for x in reference_losses(o, o.steps or o.total_steps())))
