"""A step far longer than the capture's others, its cause named from its own critical path against the median step's.

The outlier steps come from metrics/rank/outlier_ops.py (the first captured step left out: warm-up and capture
start are read by the rules that know them). For each, the step's critical path per category (ms: share × length)
is compared with the median over the typical steps of the same category; the category that grew the most is the
cause's kind: the host (then the host ops that took the extra time, on which thread and under which op, from the
same record), device compute, communication (a collective waiting on a peer or a slow link: one rank's trace
cannot tell which), or the device waiting for launches. Ranks without a path (CPU-only, event-sampled) compare the
step's breakdown parts (compute, exposed communication, idle) the same way.

Deferred to the rule that already names the step: a step whose allocator idle (`idle.alloc_steps`), one long
single-op idle stretch (`idle.stretches`: host_op_stall, host_sync) or the device idle inside runtime calls (a
blocking copy, synchronize or malloc: host_sync, allocator_churn) holds at least half its excess.

The gain is what the outlier steps cost above the median step in this capture, spread over its steps: it is paid
again only as often as the jitter recurs, which a capture of a few steps does not tell (a bound).
"""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Analysis, Finding, RankMetrics, StepBreakdown
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.outlier_steps import OutlierStepOps
from llmdiag.diagnose.rules.base import Ctx, severity_for, stored_gain
from llmdiag.diagnose.rules.idle_calls import short

DEFER_SHARE = 0.5  # another rule's one-step record holding this share of the excess names the step instead
ONE_OP_SHARE = 0.5  # one host op holding this share of the host's growth: that op, else spread (jitter)
CATEGORY_WORDS = {
    "cpu_bound": "the host (cpu_bound)", "gpu_compute_bound": "device compute (gpu_compute_bound)",
    "gpu_communication_bound": "communication (gpu_communication_bound)",
    "gpu_kernel_launch_overhead": "the device waiting for launches (gpu_kernel_launch_overhead)",
    "gpu_kernel_kernel_overhead": "gaps between kernels (gpu_kernel_kernel_overhead)",
    "compute_ms": "compute", "exposed_comm_ms": "exposed communication", "idle_ms": "idle (nothing running)",
}
HOST = ("cpu_bound", "gpu_kernel_launch_overhead", "gpu_kernel_kernel_overhead", "idle_ms")
COMM = ("gpu_communication_bound", "exposed_comm_ms")
PARTS = ("compute_ms", "exposed_comm_ms", "idle_ms")


def parts(s: StepBreakdown) -> dict[str, float]:
    """A step's time per critical-path category (ms), or per breakdown part where the step has no path."""
    cp = s.critical_path
    if cp is not None:
        return {k: v * cp.length_ms / 100.0 for k, v in cp.shares().items()}
    return {k: getattr(s, k) for k in PARTS}


def growth(r: RankMetrics, o: OutlierStepOps) -> list[tuple[float, str, float, float]] | None:
    """(ms grown, category, ms in the step, median ms) per category, the most grown first; None without the step
    or typical steps."""
    by = {s.step: s for s in r.steps}
    outl = {x.step for x in r.outlier_ops}
    s = by.get(o.step)
    typical = [x for x in r.steps[1:] if x.step not in outl]
    if s is None or not typical:
        return None
    mine = parts(s)
    rows = [parts(x) for x in typical]
    out = []
    for k, v in mine.items():
        med = float(statistics.median(p.get(k, 0.0) for p in rows))
        out.append((v - med, k, v, med))
    return sorted(out, key=lambda x: -x[0])


def deferred(r: RankMetrics, o: OutlierStepOps) -> bool:
    """An allocator flush, one long single-op idle stretch or blocking runtime calls in the step hold most of its
    excess: the rules that read them (allocator_churn, host_op_stall, host_sync) name the step and its op."""
    excess = o.time_ms - o.median_ms
    if o.runtime_idle_ms - o.runtime_idle_median_ms >= DEFER_SHARE * excess:  # a blocking copy, sync or malloc
        return True
    if r.idle is None:
        return False
    held = [a.idle_ms for a in r.idle.alloc_steps if a.step == o.step]
    held += [x.idle_ms for x in r.idle.stretches if x.step == o.step]
    return any(h >= DEFER_SHARE * excess for h in held)


def _op(g) -> str:
    if not g.op:
        return (f"time with no host op recorded on any thread {fmt(g.ms, 'ms')} against {fmt(g.median_ms, 'ms')} "
                f"(+{fmt(g.ms - g.median_ms, 'ms')})")
    under = (f", in it `{short(g.child)}` +{fmt(g.child_ms - g.child_median_ms, 'ms')}" if g.child else "")
    return (f"`{short(g.op)}` on `{short(g.thread, 40)}` {fmt(g.ms, 'ms')} against {fmt(g.median_ms, 'ms')} "
            f"(+{fmt(g.ms - g.median_ms, 'ms')}{under})")


def host_words(o: OutlierStepOps, compute_grew: float) -> tuple[str, str]:
    """(evidence, cause) of the host's part: which threads and ops took the extra time, one op or spread."""
    host = o.host_ms - o.host_median_ms
    ev = (f"; its top-level host op time {fmt(o.host_ms, 'ms')} against {fmt(o.host_median_ms, 'ms')} "
          f"(+{fmt(host, 'ms')})")
    if o.threads:
        ev += ", by thread " + ", ".join(f"`{short(x.thread, 40)}` +{fmt(x.ms - x.median_ms, 'ms')}" for x in o.threads)
    if o.ops:
        ev += "; grown the most: " + "; ".join(_op(g) for g in o.ops)
    top = o.ops[0] if o.ops else None
    excess = o.time_ms - o.median_ms
    if top is not None and top.ms - top.median_ms >= ONE_OP_SHARE * excess:
        if not top.op:
            return ev, ("most of it is host time with no op recorded: un-instrumented Python (garbage collection, "
                        "logging, a checkpoint or evaluation call) on the step's thread, or the host descheduled")
        return ev, f"one op holds most of it: `{short(top.op)}` on `{short(top.thread, 40)}`"
    return ev, (f"spread over {plural(o.grown, 'host op')} that each ran ≥ 20 % longer"
                f"{' while device compute did not grow' if compute_grew < 1.0 else ''}: "
                "the host ran slower in the whole step (CPU contention, e.g. with DataLoader workers or other "
                "processes, frequency scaling, preemption); which of these is not in the trace")


def peer_words(c: Ctx, step: int) -> str:
    """Whom the step's longer collectives waited on: the job's path in that step (metrics/job/critical_path.py:
    the rank it waited on at its collectives), else what one rank's trace cannot tell."""
    jp = c.a.critical_path
    ps = next((p for p in jp.per_step if p.step == step), None) if jp is not None else None
    if jp is not None and ps is not None and ps.waiting_on:
        rank, ms = max(ps.waiting_on.items(), key=lambda kv: kv[1])
        others = [p.waiting_on_rank * p.length_ms / 100 for p in jp.per_step if p.step != step]
        med = float(statistics.median(others)) if others else 0.0
        return (f"the job's path in that step waited {fmt(ms, 'ms')} on rank {rank} at its collectives (the path's "
                f"wait on other ranks {fmt(ps.waiting_on_rank * ps.length_ms / 100, 'ms')}, a median "
                f"{fmt(med, 'ms')} in the other steps): a late peer, whose own step says why")
    world = c.a.world_size or 0
    if world > len(c.ranks) or world == 0:
        return ("on one rank a collective waiting for a late peer and one on a slow link look the same; only the "
                f"other ranks' traces (their arrival at the collective) tell ({len(c.ranks)} of "
                f"{world or 'an unknown number of'} ranks traced)")
    if jp is None:
        return ("a late peer or a slow link: every rank is traced, but the job's path (which rank each collective "
                "waited on) is not determined here")
    return ("every rank is traced and the job's path in that step waits on no other rank at its collectives: no "
            "peer is seen to arrive late, the collectives themselves ran longer (the link or the network)")


def outlier_steps(c: Ctx) -> list[Finding]:
    """One finding over the ranks: the rank whose outlier steps cost the most is described."""
    rows = []  # (rank, cost ms in the capture, [(record, growth)])
    for r in c.ranks:
        got = [(o, g) for o in r.outlier_ops if not deferred(r, o) and (g := growth(r, o))]
        if got:
            rows.append((r, sum(o.time_ms - o.median_ms for o, _ in got), got))
    if not rows:
        return outlier_iterations(c)
    r, cost, got = max(rows, key=lambda x: x[1])
    gain = statistics.fmean(x[1] / x[0].nsteps for x in rows)
    o, g = max(got, key=lambda x: x[0].time_ms - x[0].median_ms)
    grew, cat, v, med = g[0]
    excess = o.time_ms - o.median_ms
    ev = (f"rank {r.rank}: step {o.step} took {fmt(o.time_ms, 'ms')}, {fmt(o.time_ms / o.median_ms, 'x')} the median "
          f"step of {fmt(o.median_ms, 'ms')} (the steps after the capture's first): +{fmt(excess, 'ms')}; "
          f"on its critical path {CATEGORY_WORDS[cat]} grew the most: {fmt(v, 'ms')} against {fmt(med, 'ms')} in the "
          f"median step (+{fmt(grew, 'ms')})")
    others = [f"{CATEGORY_WORDS[k]} {'+' if d >= 0 else '−'}{fmt(abs(d), 'ms')}" for d, k, _, _ in g[1:] if abs(d) >= 1.0]
    if others:
        ev += "; " + ", ".join(others)
    if cat in HOST:
        more, cause = host_words(o, next((d for d, k, _, _ in g if k in ("gpu_compute_bound", "compute_ms")), 0.0))
        ev += more
        act = ("find what slowed the host in that step: keep the DataLoader's workers and other processes off the "
               "training thread's cores (`num_workers` at most the free cores, `taskset`/`numactl` pinning, "
               "`OMP_NUM_THREADS`), look for periodic work on the training thread (checkpoints, logging, evaluation, "
               "`gc.collect`), and capture more steps to see how often it recurs")
    elif cat in COMM:
        cause = "collectives on the path took longer: " + peer_words(c, o.step)
        act = ("trace every rank of the group for the same steps: a peer arriving late (straggler) points at that "
               "rank's host or data; all arriving together points at the network")
    else:
        cause = ("the same work ran longer on the device: clock throttling (power, temperature), another process "
                 "on the device, or different work in that step; the trace records the kernels' times, not why")
        act = ("check the device's clocks and throttle reasons (`nvidia-smi -q -d PERFORMANCE,CLOCK`) and other "
               "processes on it, and compare that step's kernels with a typical step's")
    ev += f": {cause}"
    steps = sorted({o.step for x in rows for o, _ in x[2]})
    if len(got) > 1 or len(rows) > 1:
        ev += (f"; outlier {'steps' if len(steps) > 1 else 'step'} {', '.join(map(str, steps))} on "
               f"{plural(len(rows), 'rank')} ({fmt(cost, 'ms')} above the median on rank {r.rank})")
    eg = c.gain_text(gain, (f"the outlier steps' time above the median step ({fmt(cost, 'ms')} in this capture of "
                            f"{plural(r.nsteps, 'step')}), spread over its steps; paid again only as often as the "
                            "slowdown recurs, which this capture does not tell"), True)
    return [c.finding("outlier_steps", severity_for(gain, c.step_ms), "One step far longer than the others", ev,
                      [x[0].rank for x in rows], steps, act, eg, gain, "ranks[].outlier_ops, ranks[].steps[].critical_path",
                      gain_kind="bound", events=[short(x.op) for x in o.ops if x.op])]


def outlier_iterations(c: Ctx) -> list[Finding]:
    """Where the steps cannot tell (metrics/rank/collective_repeats.py): one iteration, read from a host-side
    collective called once per iteration, far longer than the others; its cost is the iteration's time above the
    median iteration (the call's own where it is the last one), spread over the capture's iterations."""
    rows = [(r, x) for r in c.ranks for x in r.outlier_collectives[:1]]
    if not rows:
        return []

    def cost(x) -> float:
        if x.period_ms is not None and x.median_period_ms is not None:
            return max(0.0, x.period_ms - x.median_period_ms)
        return x.ms - x.median_ms

    r, x = max(rows, key=lambda rx: cost(rx[1]))
    gain = statistics.fmean(cost(y) / y.calls for _, y in rows)
    apart = f" (a median {fmt(x.median_period_ms, 'ms')} apart)" if x.median_period_ms else ""
    what = f"`{short(x.name)}`{f' {short(x.shape, 40)}' if x.shape else ''} on `{short(x.thread, 40)}`"
    ev = (f"rank {r.rank}: {what} runs {x.calls} times in the capture, each call read as one iteration{apart}; call {x.index}, "
          f"{fmt(x.start_ms, 'ms')} into the capture, took {fmt(x.ms, 'ms')}, {fmt(x.ms / x.median_ms, 'x')} the "
          f"median of {fmt(x.median_ms, 'ms')} of its calls after the first")
    if x.period_ms is not None and x.median_period_ms is not None:
        ev += (f", and its iteration (to the next call's start) {fmt(x.period_ms, 'ms')} against a median of "
               f"{fmt(x.median_period_ms, 'ms')}: +{fmt(cost(x), 'ms')}")
    if x.with_it:
        ev += (f"; {plural(x.with_it, 'other repeated collective')} ran as long at the same time: the iteration's "
               "collectives together, not one call")
    if not x.in_steps:
        ev += ("; it lies outside the analysed steps (the capture's ProfilerSteps cover part of it), so the "
               "step's numbers do not include it")
    world = c.a.world_size or 0
    ev += ("; on one rank a collective waiting for a late peer and one on a slow or congested link look the same: "
           + (f"only the other ranks' traces (their arrival at this collective) tell which ({len(c.ranks)} of "
              f"{world} ranks traced)" if world > len(c.ranks) or world == 0 else
              f"all {world} ranks are traced: their arrivals at it (the `stragglers` rule's reading) tell which")
           + "; what this rank's other threads did meanwhile is "
           + ("not recorded" if r.compute_ms == 0 else "in its trace, not in this comparison"))
    act = ("trace the other ranks of the group for the same iterations: a peer arriving late (a straggler: its host, "
           "data or device) points at that rank, all arriving together at the network; capture more iterations to "
           "see how often it recurs")
    eg = (f"up to {fmt(stored_gain(gain), 'ms')} per iteration"
          + (f" ({fmt(gain / c.step_ms, 'pct')} of the step)" if c.step_ms else "")
          + f": the iteration's time above the median iteration ({fmt(cost(x), 'ms')} in this capture of "
          f"{x.calls} iterations), spread over them; paid again only as often as the slowdown recurs, which this "
          "capture does not tell")
    return [c.finding("outlier_steps", severity_for(gain, c.step_ms), "One iteration far longer than the others",
                      ev, [y[0].rank for y in rows], [], act, eg, gain, "ranks[].outlier_collectives",
                      gain_kind="bound", events=[short(x.name)])]


def outlier_pieces(a: Analysis, f: Finding) -> dict[tuple, float]:
    """The part of the gain that is device idle (the outlier steps' idle above the typical step's, per step):
    host_bound's mean idle holds it too (rules/shared_time.py counts it once)."""
    ranks = {r.rank: r for r in a.ranks}
    per = []
    for rank in f.evidence.ranks:
        r = ranks.get(rank)
        if r is None:
            continue
        by = {s.step: s for s in r.steps}
        outl = {o.step for o in r.outlier_ops}
        typical = [s.idle_ms for s in r.steps[1:] if s.step not in outl]
        med = float(statistics.median(typical)) if typical else 0.0
        per.append(sum(max(0.0, by[s].idle_ms - med) for s in f.evidence.steps if s in by) / r.nsteps)
    idle = min(statistics.fmean(per), f.gain_ms or 0.0) if per else 0.0
    return {("host_rest", "outlier_steps"): idle} if idle > 0 else {}
