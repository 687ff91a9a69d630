"""Per-step chores that cost time without being the model's work (issue #34, recall): gradient zeroing that
launches kernels, copies from pageable memory, DDP's per-forward buffer broadcast, and embedding lookups uneven
across ranks. Each reads `RankMetrics.chores` (metrics/rank/chores.py); the capture caveats (slow host ops, an
event-sampled capture) are in rules/capture.py. docs/recommendations.md describes when each fires."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding, RankMetrics
from llmdiag.diagnose.model.chores import RankChores
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

CHORE_FLOOR = 0.01  # a chore's device idle below 1 % of the step gets no finding
MIN_IDLE_MS = 0.2  # ... nor below 0.2 ms per step
LOOKUP_FLOOR = 0.03  # embedding lookups: the slowest rank's excess over the fastest below 3 % of the step: silent
LOOKUP_RATIO = 1.2  # ... or the slowest rank's lookups under 1.2x the fastest's


def chores_of(c: Ctx, complete: bool = False) -> list[tuple[RankMetrics, RankChores]]:
    """The ranks with chores recorded; `complete`: only complete captures (idle inside a span is measured only
    there: a sampled capture drops kernels, so its idle is overstated; sampled_share is recorded only then)."""
    return [(r, r.chores) for r in c.ranks if r.chores is not None and not (complete and r.chores.sampled_share)]


def _floor(r: RankMetrics, ms: float) -> bool:
    return ms >= MIN_IDLE_MS and ms >= CHORE_FLOOR * r.step_time_ms


def zero_grad(c: Ctx) -> list[Finding]:
    """`optimizer.zero_grad()` launching fill/memset kernels (set_to_none=False) while the device idles. The
    precondition read from the trace: launch calls inside the `Optimizer.zero_grad#...` op (with set_to_none=True
    it launches none). The gain is the device idle inside those ops, a bound: set_to_none=True removes the host's
    per-parameter zeroing, the step shortens by it only where the device waits for the host meanwhile."""
    bad = [(r, ch) for r, ch in chores_of(c, True) if ch.zero_grad_launches >= 1 and _floor(r, ch.zero_grad_idle_ms)]
    if not bad:
        return []
    gain = statistics.fmean(ch.zero_grad_idle_ms for _, ch in bad)
    w, ch = max(bad, key=lambda x: x[1].zero_grad_idle_ms)
    ev = (f"rank {w.rank}: `{ch.zero_grad_op}` takes {fmt(ch.zero_grad_ms, 'ms')} of host time per step and makes "
          f"{fmt(ch.zero_grad_launches, 'int')} kernel/memset launch calls per step (one fill per gradient: "
          f"`set_to_none=False`); the {c.dev} is idle {fmt(ch.zero_grad_idle_ms, 'ms')} per step inside it "
          f"({plural(len(bad), 'rank')})")
    act = ("`optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0): gradients are freed instead of "
           "zeroed, no kernel is launched; assumes no code reads `.grad` between zero_grad and backward expecting "
           "zeros (a `None` grad there needs handling)")
    eg = c.gain_text(gain, f"the {c.dev} idle inside zero_grad, mean over those ranks; it shortens the step only "
                     "where the host bounds it", bound=True)
    return [c.finding("zero_grad", severity_for(gain, c.step_ms), "zero_grad launches a fill per gradient", ev,
                      [r.rank for r, _ in bad], steps_where([w]), act, eg, gain, "ranks[].chores.zero_grad_idle_ms",
                      gain_kind="bound", events=[ch.zero_grad_op, "aten::zero_", "cudaLaunchKernel"])]


def pageable_copy(c: Ctx) -> list[Finding]:
    """Host<->device copies from pageable memory: the host is held in the copy call until the data is staged,
    so it queues no work meanwhile. Precondition: copies named pageable (`Memcpy HtoD (Pageable -> Device)`)
    linked to their calls, the host held in them 1 % of the step or more. The gain is the device idle in each
    call's length after its copy ends (the host, held, had queued nothing: the lead a non-blocking copy keeps),
    a bound."""
    bad = [(r, ch) for r, ch in chores_of(c, True) if ch.pageable_copies > 0 and _floor(r, ch.pageable_call_ms)]
    if not bad:
        return []
    gain = statistics.fmean(ch.pageable_idle_ms for _, ch in bad)
    w, ch = max(bad, key=lambda x: x[1].pageable_idle_ms)
    ev = (f"rank {w.rank}: {fmt(ch.pageable_copies, 'avg')} `{ch.pageable_name}` copies per step, "
          f"{fmt(ch.pageable_device_ms, 'ms')} of copy time on the {c.dev}; the host is held "
          f"{fmt(ch.pageable_call_ms, 'ms')} per step in their calls (a pageable copy returns only once staged), and "
          f"the {c.dev} idles {fmt(ch.pageable_idle_ms, 'ms')} per step in the calls' length after the copies end "
          f"({plural(len(bad), 'rank')})")
    act = ("copy from pinned memory without blocking: `DataLoader(pin_memory=True)` (or `tensor.pin_memory()`) and "
           "`.to(device, non_blocking=True)`, so the host queues the next ops while the copy runs; assumes the "
           "host memory can be pinned (pinned memory is not swappable)")
    eg = c.gain_text(gain, f"the {c.dev} idle after the copies for as long as the host was held in them, mean "
                     "over those ranks; faster pinned transfers are not counted", bound=True)
    return [c.finding("pageable_copy", severity_for(gain, c.step_ms), "Copies from pageable memory hold the host",
                      ev, [r.rank for r, _ in bad], steps_where([w]), act, eg, gain, "ranks[].chores.pageable_idle_ms",
                      gain_kind="bound", events=[ch.pageable_name, "cudaMemcpyAsync"])]


def broadcast_buffers(c: Ctx) -> list[Finding]:
    """DDP's `broadcast_buffers=True`: every forward rank 0 broadcasts the module's buffers (BatchNorm running
    statistics), packed and unpacked on the host. Precondition: broadcast collectives recorded inside
    `DistributedDataParallel.forward` in every step. The gain is the device idle inside the pack / broadcast /
    unpack ops, a bound; whether the buffers need the sync is the user's to say (the trace cannot)."""
    bad = [(r, ch) for r, ch in chores_of(c) if ch.buffer_bcasts >= 1 and _floor(r, ch.buffer_idle_ms)]
    if not bad:
        return []
    gain = statistics.fmean(ch.buffer_idle_ms for _, ch in bad)
    w, ch = max(bad, key=lambda x: x[1].buffer_idle_ms)
    ev = (f"rank {w.rank}: {fmt(ch.buffer_bcasts, 'avg')} broadcasts per step inside `DistributedDataParallel.forward`"
          f" ({ch.buffer_elems} elements per step: module buffers, e.g. BatchNorm running statistics and counters), "
          f"with their pack/unpack ops (`aten::flatten_dense_tensors`, `aten::unflatten_dense_tensors`) "
          f"{fmt(ch.buffer_host_ms, 'ms')} of host time per step, the {c.dev} idle {fmt(ch.buffer_idle_ms, 'ms')} "
          f"of it ({plural(len(bad), 'rank')}); this includes any idle host_op_stall names under those ops")
    act = ("`DistributedDataParallel(..., broadcast_buffers=False)` where the buffers need no sync every step "
           "(each rank's BatchNorm statistics are then its own: use `SyncBatchNorm` or broadcast them once before "
           "evaluation if they must agree); the trace cannot tell whether they do")
    eg = c.gain_text(gain, f"the {c.dev} idle inside the buffer broadcast's host ops, mean over those ranks",
                     bound=True)
    return [c.finding("broadcast_buffers", severity_for(gain, c.step_ms), "DDP broadcasts buffers every forward",
                      ev, [r.rank for r, _ in bad], steps_where([w]), act, eg, gain, "ranks[].chores.buffer_idle_ms",
                      gain_kind="bound", events=["DistributedDataParallel.forward", "c10d::broadcast_",
                                                 "aten::flatten_dense_tensors", "aten::unflatten_dense_tensors"])]


def embedding_imbalance(c: Ctx) -> list[Finding]:
    """Embedding lookups (TBE / EmbeddingBag kernels) uneven across ranks of one job: the rank with the most lookup
    time per step holds its peers at the next collective. Precondition: at least two ranks with lookups and
    all-to-all collectives (sharded tables exchange their lookups by all_to_all), the slowest rank's lookups
    LOOKUP_RATIO x the fastest's. The gain, a bound: the slowest rank's
    lookup time above the ranks' mean (what a sharding balanced by measured cost could move off it)."""
    rs = [(r, ch) for r, ch in chores_of(c) if ch.lookup_ms > 0 and any(x.kind == "alltoall" for x in r.comm_by_kind)]
    if len(rs) < 2:
        return []
    hi, a = max(rs, key=lambda x: x[1].lookup_ms)
    lo, b = min(rs, key=lambda x: x[1].lookup_ms)
    mean = statistics.fmean(ch.lookup_ms for _, ch in rs)
    gain = a.lookup_ms - mean
    if a.lookup_ms < LOOKUP_RATIO * b.lookup_ms or a.lookup_ms - b.lookup_ms < LOOKUP_FLOOR * hi.step_time_ms:
        return []
    ev = (f"rank {hi.rank} runs {fmt(a.lookup_ms, 'ms')} of embedding-lookup kernels per step "
          f"({fmt(a.lookup_kernels, 'avg')} kernels), rank {lo.rank} {fmt(b.lookup_ms, 'ms')} "
          f"({fmt(b.lookup_kernels, 'avg')}); the longest on rank {hi.rank}: `{a.lookup_top[:90]}` "
          f"{fmt(a.lookup_top_ms, 'ms')} per step, on rank {lo.rank}: `{b.lookup_top[:90]}` "
          f"{fmt(b.lookup_top_ms, 'ms')} (over {plural(len(rs), 'rank')} with lookups)")
    act = ("rebalance the embedding sharding by measured cost: the planner's cost model (TorchRec "
           "`EmbeddingShardingPlanner` with the tables' real pooling factors / `ParameterConstraints`), or split "
           "the heaviest tables (row-wise / column-wise sharding); assumes the lookup time follows the tables "
           "placed on the rank (its lookups per step), not a slower device")
    eg = c.gain_text(gain, f"rank {hi.rank}'s lookup time above the {plural(len(rs), 'rank')}' mean; the others "
                     "wait for it only where the lookups are on its critical path", bound=True)
    return [c.finding("embedding_imbalance", severity_for(gain, c.step_ms), "Embedding lookups uneven across ranks",
                      ev, [hi.rank], steps_where([hi]), act, eg, gain, "ranks[].chores.lookup_ms",
                      gain_kind="bound", events=[a.lookup_top[:120]])]
