"""Caveats on what a capture's times are (issue #34, recall): host ops far slower than their floor (a contended
or oversubscribed CPU, measured, its cause assumed), an event-sampled capture (per-step totals are lower
bounds) and a training loop captured without its backward (forward_only). Both read `RankMetrics.chores` (metrics/rank/chores.py) and give no gain: they qualify the others. The
sampled caveat also states what a sample supports: the recorded communication kernels per step (a lower bound,
device events only) and the host phases it left mostly unrecorded (`RankMetrics.phase_cover`)."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx
from llmdiag.diagnose.rules.chores import chores_of
from llmdiag.diagnose.model.chores import META_MIN_CALLS, META_SLOW_US

# Medians of aten::view / as_strided on the real traces llmdiag is tested on, profiler on: 0.2-5 µs (2021
# Kineto on a busy DataLoader host: up to 19 µs median, its fastest call 2-3 µs); nccl_data: fastest 20.4 µs.
META_TYPICAL, META_TYPICAL_MAX_US = "0.2-5 µs", 5.0


def slow_host_ops(c: Ctx) -> list[Finding]:
    """Metadata-only ops (`aten::view`, `aten::as_strided`: no data work, only a tensor header) whose fastest call
    over META_MIN_CALLS takes META_SLOW_US or more: every host op is slow, not some. The measured fact is the
    floor; the cause (CPU contention, oversubscription, throttling) is an assumption the text says."""
    bad = [(r, ch) for r, ch in chores_of(c) if ch.meta_calls >= META_MIN_CALLS and (ch.meta_min_us or 0.0) >= META_SLOW_US]
    if not bad:
        return []
    w, ch = max(bad, key=lambda x: x[1].meta_min_us or 0.0)
    ev = (f"rank {w.rank}: {fmt(ch.meta_calls, 'int')} calls of metadata-only ops (`{ch.meta_op}` most), which "
          f"do no data work, take {fmt(ch.meta_median_us, 'us')} median and never under "
          f"{fmt(ch.meta_min_us, 'us')}, against a typical {META_TYPICAL} with the profiler on (the median "
          f"{(ch.meta_median_us or 0.0) / META_TYPICAL_MAX_US:.1f}x its upper end): every host op runs several "
          f"times slower than its usual cost ({plural(len(bad), 'rank')}); the trace cannot say why")
    act = ("check the host for CPU contention: other processes on the cores, more threads than cores "
           "(`OMP_NUM_THREADS`, DataLoader workers, ranks per host), CPU affinity / NUMA binding (`numactl`, "
           "`taskset`), frequency throttling; host-side gains (host_bound, host_op_stall) assume this host speed")
    return [c.finding("slow_host_ops", "low", "Host ops far slower than their usual cost", ev,
                      [r.rank for r, _ in bad], [], act, "none: a caveat on the host-side numbers", None,
                      "ranks[].chores.meta_min_us", events=[ch.meta_op])]


def sampled_capture(c: Ctx) -> list[Finding]:
    """An event-sampled capture (Kineto sampled / partial recording): the host ops' External ids leave holes, so
    kernels, copies and collectives may be missing from every step. Per-step totals are lower bounds, idle an
    upper bound."""
    bad = [(r, ch) for r, ch in chores_of(c) if ch.sampled_share is not None]
    if not bad:
        return []
    w, ch = min(bad, key=lambda x: x[1].sampled_share or 0.0)
    ev = (f"rank {w.rank}: only {fmt(ch.sampled_share, 'pct')} of its host ops are followed by the next "
          f"op's External id (a complete capture: 98-100 %) ({plural(len(bad), 'rank')}): the capture recorded "
          "a sample of the events, not all of them" + _comm_floor([r for r, _ in bad]) + _bare_phases(w))
    act = ("read every per-step total (kernel, communication, copy time, kernels and ops per step) as a lower bound "
           "and every idle or gap as an upper bound; whether the step waits on its communication (exposure, the "
           "critical path, the slow rank or link) cannot be read from a sample: capture again without sampling "
           "(a plain `torch.profiler.profile` schedule, no event sampling), on every rank, with `with_stack=True`"
           + (f"; until then {_bare_names(w)} cannot be analysed from this capture" if _bare(w) else ""))
    return [c.finding("sampled_capture", "low", "Event-sampled capture: per-step totals are lower bounds", ev,
                      [r.rank for r, _ in bad], [], act, "none: a caveat on every number", None,
                      "ranks[].chores.sampled_share", events=["External id"])]


def forward_only(c: Ctx) -> list[Finding]:
    """A training loop captured without its backward: the steps call `Optimizer.zero_grad` or run a data-parallel
    wrapper (DDP / FSDP ops), signs of training, but no rank runs an autograd backward op or an optimizer step in
    them (RankMetrics.training). Inference (vLLM: none of those signs) is not this. Every backward, optimizer and
    gradient-communication reading is then out of reach, which the user must be told rather than left to infer
    from silence (torchrec sst_sleep_pl_dense_after_backward_2)."""
    ev = [(r, r.training) for r in c.ranks if r.training is not None]
    if not ev or any(t.backward_ops > 0 or t.optimizer_ops > 0 for _, t in ev):
        return []
    zg = [(r, r.chores.zero_grad_op) for r, _ in ev if r.chores is not None and r.chores.zero_grad_op]
    wrap = [r for r, t in ev if t.ddp_ops > 0 or t.fsdp_ops > 0]
    if not zg and not wrap:
        return []
    fsdp = any(t.fsdp_ops > 0 for _, t in ev)
    sign = (f"call `{zg[0][1][:80]}` (a training loop's zero_grad)" if zg else
            "run FSDP's ops (a model sharded for training)" if fsdp else
            "run `DistributedDataParallel.forward` (a model wrapped in DDP for training)")
    ranks = sorted({r.rank for r, _ in zg} | {r.rank for r in wrap})
    text = (f"rank {ranks[0]}: the profiled steps {sign} but no autograd backward op (`*Backward*`, "
            f"`autograd::engine::evaluate_function`) and no `Optimizer.step#...` on any of the {plural(len(ev), 'rank')}: "
            "the capture holds the forward only (a forward-only loop, or the profiler's window on a forward or "
            "evaluation phase)")
    act = ("read no backward, optimizer or gradient-communication cost from this capture (none of it was "
           "recorded); if the job trains, capture steps that include `loss.backward()` and `optimizer.step()` "
           "(check where `prof.step()` is called and the schedule's window)")
    return [c.finding("forward_only", "low", "Forward-only capture of a training loop", text, ranks, [], act,
                      "none: a caveat on what the capture shows", None, "ranks[].training",
                      events=["Optimizer.zero_grad#", "autograd backward ops", "Optimizer.step#"])]


COMM_FLOOR = 0.05  # recorded communication under 5 % of the step is not named in the caveat


def _comm_floor(ranks) -> str:
    """The communication kernels recorded on the sampled ranks, per step: a lower bound (a sample drops kernels, it
    never lengthens the ones it keeps), the one communication number a sample supports. Read from the device's
    communication intervals alone (RankMetrics.comm_ms, comm_by_kind); their exposure is not stated (the compute
    under them may be dropped: comm_gain.overlap_unmeasured)."""
    rows = [r for r in ranks if r.step_time_ms and r.comm_ms >= COMM_FLOOR * r.step_time_ms]
    if not rows:
        return ""
    lo, hi = min(rows, key=lambda r: r.comm_ms), max(rows, key=lambda r: r.comm_ms)
    kinds: dict[str, float] = {}
    for r in rows:
        for cc in r.comm_by_kind:
            kinds[cc.kind] = max(kinds.get(cc.kind, 0.0), cc.total_ms / r.nsteps if r.nsteps else 0.0)
    top = ", ".join(f"{k} up to {fmt(v, 'ms')}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:3])
    span = (f"{fmt(lo.comm_ms, 'ms')} (rank {lo.rank}) to {fmt(hi.comm_ms, 'ms')} (rank {hi.rank})" if lo is not hi
            else f"{fmt(hi.comm_ms, 'ms')} (rank {hi.rank})")
    return (f"; what it kept is exact: the recorded communication kernels alone run {span} per step "
            f"({fmt(hi.comm_ms / hi.step_time_ms, 'pct')} of rank {hi.rank}'s step; {top} per step), read from "
            "the device's events only: a lower bound on the communication time (a sample drops kernels, it never "
            "lengthens one), while how much of it is exposed is not stated (the compute under it may be dropped)")


BARE_SHARE, BARE_STEP = 0.5, 0.05  # a phase counts as unrecorded under half covered and over 5 % of the step


def _bare(r) -> list:
    """The rank's phases the sample left mostly bare (RankMetrics.phase_cover, longest first)."""
    return [p for p in r.phase_cover if p.span_ms >= BARE_STEP * r.step_time_ms
            and p.covered_ms < BARE_SHARE * p.span_ms]


def _bare_names(r) -> str:
    return ", ".join(f"`{p.name[:60]}`" for p in _bare(r)[:3])


def _bare_phases(r) -> str:
    """Which host phases the sample recorded least (under BARE_SHARE of their span covered by any recorded host op
    or runtime call, any thread): their time is in the step, what happens in it is not in the trace."""
    rows = _bare(r)
    if not rows:
        return ""
    parts = "; ".join(f"`{p.name[:60]}` {fmt(p.span_ms, 'ms')} per step, {fmt(p.covered_ms / p.span_ms, 'pct')} of "
                      "it covered" for p in rows[:3])
    return (f"; phases left mostly unrecorded on rank {r.rank} (recorded host ops and runtime calls, any thread, "
            f"cover under half their span): {parts}")
