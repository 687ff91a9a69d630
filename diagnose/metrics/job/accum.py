"""Gradient accumulation across ranks: microsteps and data-parallel traffic per optimizer step.

Reads what each rank's worker counted (rank/accum.py: `llmdiag/forward` spans per step, all-gathers launched
after a step's second forward) into one `AccumSummary`, with the manifest's `grad_accum` where no rank has labels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.roles import pg_role

if TYPE_CHECKING:
    from llmdiag.diagnose.model.moe import AccumSummary


def accum_summary(forwards: dict[int, list[int]], ranks, manifest, layout: dict | None,
                  regather: dict[int, float] | None = None) -> AccumSummary | None:
    """None unless a step holds more than one forward (labels) or the manifest says --grad-accum > 1."""
    counts = [c for cs in forwards.values() for c in cs if c > 0]
    option = manifest.option("grad_accum") if manifest else None
    if counts and statistics.median(counts) > 1:
        n, source = int(statistics.median(counts)), "labels"
    elif isinstance(option, int) and option > 1:
        n, source = option, "manifest"
    else:
        return None
    from llmdiag.diagnose.model.moe import AccumSummary  # imported where there is accumulation

    dp_ms, dp_ops, gather_ms, reduce_ms = [], [], [], []
    for r in ranks:
        cs = [c for c in r.comm_by_kind if pg_role(c.kind, c.pg, c.group_size, layout) == "dp"]
        dp_ms.append(sum(c.total_ms for c in cs) / r.nsteps)
        dp_ops.append(sum(c.count for c in cs) / r.nsteps)
        gather_ms.append(sum(c.total_ms for c in cs if c.kind == "allgather") / r.nsteps)
        reduce_ms.append(sum(c.total_ms for c in cs if c.kind in ("allreduce", "reducescatter")) / r.nsteps)
    k = max(1, len(ranks))
    return AccumSummary(microsteps=n, source=source, dp_comm_ms_per_step=sum(dp_ms) / k,
                        dp_ops_per_step=sum(dp_ops) / k, allgather_ms_per_step=sum(gather_ms) / k,
                        reduce_ms_per_step=sum(reduce_ms) / k,
                        regather_ms_per_step=sum((regather or {}).values()) / max(1, len(regather or {})))
