"""Per-step chores that cost time without being the model's work (issue #34, recall): gradient zeroing that
launches kernels, copies from pageable memory, DDP's per-forward buffer broadcast, and embedding lookups uneven
across ranks. Each reads `RankMetrics.chores` (metrics/rank/chores.py); the capture caveats (slow host ops, an
event-sampled capture) are in rules/capture.py. docs/recommendations.md describes when each fires."""

from __future__ import annotations

from typing import Callable

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


def _per_rank_chore(c: Ctx, rid: str, title: str, bad: list[tuple[RankMetrics, RankChores]], idle_of: Callable,
                    evidence: Callable, act: str, why: str, metric: str, events: Callable) -> list[Finding]:
    """The shape the per-rank chores share: the gain is the mean over the ranks that have it of the device idle
    the chore holds (`idle_of`), a bound; the evidence names the worst rank."""
    if not bad:
        return []
    gain = statistics.fmean(idle_of(ch) for _, ch in bad)
    w, ch = max(bad, key=lambda x: idle_of(x[1]))
    eg = c.gain_text(gain, why, bound=True)
    return [c.finding(rid, severity_for(gain, c.step_ms), title, f"{evidence(w, ch)} ({plural(len(bad), 'rank')})",
                      [r.rank for r, _ in bad], steps_where([w]), act, eg, gain, metric, gain_kind="bound",
                      events=events(ch))]


def zero_grad(c: Ctx) -> list[Finding]:
    """`optimizer.zero_grad()` launching fill/memset kernels (set_to_none=False) while the device idles. The
    precondition read from the trace: launch calls inside the `Optimizer.zero_grad#...` op (with set_to_none=True
    it launches none). The gain is the device idle inside those ops, a bound: set_to_none=True removes the host's
    per-parameter zeroing, the step shortens by it only where the device waits for the host meanwhile."""
    bad = [(r, ch) for r, ch in chores_of(c, True) if ch.zero_grad_launches >= 1 and _floor(r, ch.zero_grad_idle_ms)]
    act = ("`optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0): gradients are freed instead of "
           "zeroed, no kernel is launched; assumes no code reads `.grad` between zero_grad and backward expecting "
           "zeros (a `None` grad there needs handling)")
    return _per_rank_chore(
        c, "zero_grad", "zero_grad launches a fill per gradient", bad, lambda ch: ch.zero_grad_idle_ms,
        lambda w, ch: (f"rank {w.rank}: `{ch.zero_grad_op}` takes {fmt(ch.zero_grad_ms, 'ms')} of host time per step "
                       f"and makes {fmt(ch.zero_grad_launches, 'int')} kernel/memset launch calls per step (one fill "
                       f"per gradient: `set_to_none=False`); the {c.dev} is idle {fmt(ch.zero_grad_idle_ms, 'ms')} per "
                       "step inside it"),
        act, f"the {c.dev} idle inside zero_grad, mean over those ranks; it shortens the step only where the host "
        "bounds it", "ranks[].chores.zero_grad_idle_ms",
        lambda ch: [ch.zero_grad_op, "aten::zero_", "cudaLaunchKernel"])


def pageable_copy(c: Ctx) -> list[Finding]:
    """Host<->device copies from pageable memory: the host is held in the copy call until the data is staged,
    so it queues no work meanwhile. Precondition: copies named pageable (`Memcpy HtoD (Pageable -> Device)`)
    linked to their calls, the host held in them 1 % of the step or more. The gain is the device idle in each
    call's length after its copy ends (the host, held, had queued nothing: the lead a non-blocking copy keeps),
    a bound."""
    bad = [(r, ch) for r, ch in chores_of(c, True) if ch.pageable_copies > 0 and _floor(r, ch.pageable_call_ms)]
    act = ("copy from pinned memory without blocking: `DataLoader(pin_memory=True)` (or `tensor.pin_memory()`) and "
           "`.to(device, non_blocking=True)`, so the host queues the next ops while the copy runs; assumes the "
           "host memory can be pinned (pinned memory is not swappable)")
    return _per_rank_chore(
        c, "pageable_copy", "Copies from pageable memory hold the host", bad, lambda ch: ch.pageable_idle_ms,
        lambda w, ch: (f"rank {w.rank}: {fmt(ch.pageable_copies, 'avg')} `{ch.pageable_name}` copies per step, "
                       f"{fmt(ch.pageable_device_ms, 'ms')} of copy time on the {c.dev}; the host is held "
                       f"{fmt(ch.pageable_call_ms, 'ms')} per step in their calls (a pageable copy returns only once "
                       f"staged), and the {c.dev} idles {fmt(ch.pageable_idle_ms, 'ms')} per step in the calls' "
                       "length after the copies end"),
        act, f"the {c.dev} idle after the copies for as long as the host was held in them, mean over those ranks; "
        "faster pinned transfers are not counted", "ranks[].chores.pageable_idle_ms",
        lambda ch: [ch.pageable_name, "cudaMemcpyAsync"])


def broadcast_buffers(c: Ctx) -> list[Finding]:
    """DDP's `broadcast_buffers=True`: every forward rank 0 broadcasts the module's buffers (BatchNorm running
    statistics), packed and unpacked on the host. Precondition: broadcast collectives recorded inside
    `DistributedDataParallel.forward` in every step. The gain is the device idle inside the pack / broadcast /
    unpack ops, a bound; whether the buffers need the sync is the user's to say (the trace cannot)."""
    bad = [(r, ch) for r, ch in chores_of(c) if ch.buffer_bcasts >= 1 and _floor(r, ch.buffer_idle_ms)]
    act = ("`DistributedDataParallel(..., broadcast_buffers=False)` where the buffers need no sync every step "
           "(each rank's BatchNorm statistics are then its own: use `SyncBatchNorm` or broadcast them once before "
           "evaluation if they must agree); the trace cannot tell whether they do")
    return _per_rank_chore(
        c, "broadcast_buffers", "DDP broadcasts buffers every forward", bad, lambda ch: ch.buffer_idle_ms,
        lambda w, ch: (f"rank {w.rank}: {fmt(ch.buffer_bcasts, 'avg')} broadcasts per step inside "
                       f"`DistributedDataParallel.forward` ({ch.buffer_elems} elements per step: module buffers, e.g. "
                       "BatchNorm running statistics and counters), with their pack/unpack ops "
                       "(`aten::flatten_dense_tensors`, `aten::unflatten_dense_tensors`) "
                       f"{fmt(ch.buffer_host_ms, 'ms')} of host time per step, the {c.dev} idle "
                       f"{fmt(ch.buffer_idle_ms, 'ms')} of it"),
        act, f"the {c.dev} idle inside the buffer broadcast's host ops, mean over those ranks",
        "ranks[].chores.buffer_idle_ms",
        lambda ch: ["DistributedDataParallel.forward", "c10d::broadcast_", "aten::flatten_dense_tensors",
                    "aten::unflatten_dense_tensors"])


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
