"""What the runs an analysis leaves out hold: their steps, median step, headline numbers and outlier steps.

An input with several runs is analysed one run at a time (metrics/job/runs.py), yet every file is parsed in the
one pass, so each rank of every run already carries its per-step breakdown, per-step critical path and outlier
steps (metrics/rank/outlier_ops.py). Reading those costs O(ranks): no second parse, no second assembly. A step
that ran far longer in a run not analysed (B2's run 1: step 9, +37 ms of host jitter) is stated, with what its
own critical path says grew, as one line per run beside the runs warning, and `--run K` analyses it whole.

Why lines, not findings: a finding's gain is per step of the analysed run, shares its time with the other
findings (rules/shared_time.py) and its evidence names that run's ranks; the other run's outlier is a fact about
another capture, so it is stated as such, with the command that gives its findings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.metrics.rank.outlier_ops import MIN_EXCESS_MS, MIN_STEPS, RATIO
from llmdiag.diagnose.model.analysis import RankMetrics, StepBreakdown
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.model.outlier_steps import OutlierStepOps
from llmdiag.diagnose.model.runs import OTHER_RUN, RunInfo, RunOutlier
from llmdiag.diagnose.rules.idle_calls import short
from llmdiag.diagnose.rules.outlier_steps import CATEGORY_WORDS, DEFER_SHARE, HOST, ONE_OP_SHARE, growth, parts

if TYPE_CHECKING:
    from llmdiag.diagnose.metrics.job.runs import Runs
    from llmdiag.diagnose.metrics.rank.per_rank import RankOutput

MAX_OUTLIERS = 3  # outlier steps kept per run, the largest excess first
MAX_LINES = 3  # other runs described per analysis (the summary's runs[] holds the rest)
DIFFER = 0.10  # a headline number differs from the analysed run's from this share ...
DIFFER_MS = 1.0  # ... and this many ms
HEADLINE = (("step_ms", "mean step"), ("compute_ms", "compute per step"),
            ("exposed_comm_ms", "exposed communication per step"), ("idle_ms", "idle per step"))
IDLE_RATIO, IDLE_MS = 3.0, 5.0  # a rank's idle in its median step stands out from this × the median rank's and ms more
RANK_KEY = {"step_ms": "step_time_ms"}  # RunInfo's name -> RankMetrics' where they differ


def digest_runs(seen: Runs, groups: Sequence[Sequence[RankOutput]]) -> None:
    """Fill each run's digest fields in `seen.infos` (shared by every analysis of the input), once."""
    for info, run in zip(seen.infos, groups):
        digest(info, [o for o in run if not o.error and o.metrics is not None and o.metrics.steps])


def digest(info: RunInfo, outs: list[RankOutput]) -> None:
    """The run's steps, median step, headline means and outlier steps, from its ranks' metrics."""
    ranks = [o.metrics for o in outs if o.metrics is not None]
    if not ranks:
        return
    info.steps = int(statistics.median(len(r.steps) for r in ranks))
    info.first_step = min(r.steps[0].step for r in ranks)
    info.last_step = max(r.steps[-1].step for r in ranks)
    info.median_step_ms = float(statistics.median(_median_step(r) for r in ranks))  # type: ignore[arg-type]
    for key, _ in HEADLINE:
        setattr(info, key, statistics.fmean(getattr(r, RANK_KEY.get(key, key)) for r in ranks))
    info.outliers = outliers(ranks)
    idle = [(float(statistics.median(x.idle_ms for x in r.steps)), r.rank) for r in ranks]
    if len(idle) > 1 and all(k is not None and k >= 0 for _, k in idle):  # rank-less traces: no rank to name
        info.idle_rank_ms, info.idle_rank = max(idle, key=lambda x: (x[0], -x[1]))
        info.idle_median_ms = float(statistics.median(v for v, _ in idle))


def _median_step(r: RankMetrics) -> float:
    """The rank's median step over all its steps (the terminal's "median step"): with 3 steps, the median of the
    two after the first is their mean, an outlier's half."""
    return float(statistics.median(x.time_ms for x in r.steps))


def outliers(ranks: list[RankMetrics]) -> list[RunOutlier]:
    """The run's outlier steps, each described on the rank where it ran the most above its median: per step
    number the count of ranks and the worst rank; linear in ranks × outlier steps."""
    worst: dict[int, tuple[float, RankMetrics, OutlierStepOps]] = {}
    count: dict[int, int] = {}
    for r in ranks:
        for o in r.outlier_ops:
            count[o.step] = count.get(o.step, 0) + 1
            ex = o.time_ms - o.median_ms
            if o.step not in worst or ex > worst[o.step][0]:
                worst[o.step] = (ex, r, o)
    if not worst:
        return longest(ranks)
    out = []
    for step, (_, r, o) in sorted(worst.items(), key=lambda kv: -kv[1][0])[:MAX_OUTLIERS]:
        rank = r.rank if r.rank is not None and r.rank >= 0 else None  # -1: a trace with no rank number
        x = RunOutlier(step, rank, count[step], o.time_ms, o.median_ms)  # type: ignore[arg-type]
        _explain(x, r, o)
        out.append(x)
    return out


def longest(ranks: list[RankMetrics]) -> list[RunOutlier]:
    """Where a rank has too few steps for the outlier test (fewer than MIN_STEPS after the first), its longest
    step against the median of all its steps, from RATIO × up: A3's runs (3 steps, step 5 an allocator flush of
    2.5×) say nothing otherwise. Kept on the rank where it is the most above; what holds it, as `_explain`."""
    worst: dict[int, tuple[float, RankMetrics, StepBreakdown, float]] = {}
    count: dict[int, int] = {}
    for r in ranks:
        if len(r.steps) - 1 >= MIN_STEPS or len(r.steps) < 2:
            continue
        med = float(statistics.median(x.time_ms for x in r.steps))
        s = max(r.steps, key=lambda x: x.time_ms)
        if s.time_ms < RATIO * med or s.time_ms - med < MIN_EXCESS_MS:
            continue
        count[s.step] = count.get(s.step, 0) + 1
        if s.step not in worst or s.time_ms - med > worst[s.step][0]:
            worst[s.step] = (s.time_ms - med, r, s, med)
    out = []
    for step, (ex, r, s, med) in sorted(worst.items(), key=lambda kv: -kv[1][0])[:MAX_OUTLIERS]:
        x = RunOutlier(step, r.rank if r.rank is not None and r.rank >= 0 else None, count[step], s.time_ms, med,
                       of_all=True)
        _held(x, r, ex)
        if not x.held_by:
            rest = [parts(y) for y in r.steps if y.step != step]
            grew = sorted(((v - float(statistics.median(p.get(k, 0.0) for p in rest)), k)
                           for k, v in parts(s).items()), reverse=True)
            if grew:
                x.grew_ms, x.category = grew[0]
        out.append(x)
    return out


def _held(x: RunOutlier, r: RankMetrics, excess: float, runtime_ms: float = 0.0) -> None:
    """Another rule's one-step record holding DEFER_SHARE of the excess: allocator calls, blocking runtime
    calls (their device idle above the typical step's, `runtime_ms`), one long host op."""
    alloc = max((a.idle_ms for a in (r.idle.alloc_steps if r.idle else []) if a.step == x.step), default=0.0)
    stretch = max((s for s in (r.idle.stretches if r.idle else []) if s.step == x.step), key=lambda s: s.idle_ms,
                  default=None)
    if alloc >= DEFER_SHARE * excess:
        x.held_by, x.grew_ms = "allocator", alloc
    elif runtime_ms >= DEFER_SHARE * excess:
        x.held_by, x.grew_ms = "runtime", runtime_ms
    elif stretch is not None and stretch.idle_ms >= DEFER_SHARE * excess:
        x.held_by, x.grew_ms, x.op = "stretch", stretch.idle_ms, stretch.op


def _explain(x: RunOutlier, r: RankMetrics, o: OutlierStepOps) -> None:
    """What holds the excess: another rule's one-step record (allocator, blocking calls, one long host op),
    else the critical-path category that grew the most, with the host op that grew the most."""
    _held(x, r, o.time_ms - o.median_ms, o.runtime_idle_ms - o.runtime_idle_median_ms)
    if x.held_by:
        return
    g = growth(r, o)
    if g:
        x.grew_ms, x.category = g[0][0], g[0][1]
    if o.ops:
        top = o.ops[0]
        x.op, x.op_grew_ms = top.op, top.ms - top.median_ms
    x.grown_ops = o.grown


def run_lines(infos: list[RunInfo]) -> list[str]:
    """One line per run not analysed (at most MAX_LINES, the nearest to the analysed run first in age order),
    against the analysed run; none for a single run."""
    cur = next((r for r in infos if r.analysed), None)
    if cur is None:
        return []
    others = sorted((r for r in infos if not r.analysed), key=lambda r: abs(r.number - cur.number))[:MAX_LINES]
    return [line(r, cur) for r in sorted(others, key=lambda r: r.number)]


def line(r: RunInfo, cur: RunInfo) -> str:
    """The run `r` in one line, its numbers against the analysed run `cur`'s."""
    head = f"{OTHER_RUN}{r.number} (`--run {r.number}` analyses it)"
    if r.steps is None or r.median_step_ms is None:
        return head + ": no rank of it has a step"
    steps = (f"{plural(r.steps, 'step')} (#{r.first_step}–#{r.last_step})" if r.first_step != r.last_step
             else f"{plural(r.steps, 'step')} (#{r.first_step})")
    text = (f"{head}: {steps}, median step {fmt(r.median_step_ms, 'ms')} against {fmt(cur.median_step_ms, 'ms')} "
            f"in run {cur.number}")
    diffs = []
    for key, word in HEADLINE:
        a, b = getattr(r, key), getattr(cur, key)
        if a is not None and b is not None and abs(a - b) >= DIFFER_MS and abs(a - b) >= DIFFER * max(abs(b), 1e-9):
            diffs.append(f"{word} {fmt(a, 'ms')} against {fmt(b, 'ms')}")
    text += "; " + ("; ".join(_outlier(x) for x in r.outliers) if r.outliers else "no outlier step")
    if _idle_stands_out(r):
        same = cur.idle_rank == r.idle_rank and _idle_stands_out(cur)
        text += (f"; rank {r.idle_rank} idles {fmt(r.idle_rank_ms, 'ms')} in its median step against "
                 f"{fmt(r.idle_median_ms, 'ms')} on the median rank ("
                 + (f"in run {cur.number} too: {fmt(cur.idle_rank_ms, 'ms')})" if same else
                    f"run {cur.number}: rank {cur.idle_rank}, {fmt(cur.idle_rank_ms, 'ms')})" if _idle_stands_out(cur)
                    else f"no rank stands out so in run {cur.number})"))
    return text + (("; " + ", ".join(diffs)) if diffs else
                   f"; its mean step, compute, exposed communication and idle within {DIFFER:.0%} of run {cur.number}'s")


def _idle_stands_out(r: RunInfo) -> bool:
    """One rank idles IDLE_RATIO × the median rank's idle in its median step, and IDLE_MS more: a rank whose
    device waits on its own host while its peers' do not (A3: rank 2's host stall, both runs)."""
    return (r.idle_rank_ms is not None and r.idle_median_ms is not None
            and r.idle_rank_ms >= IDLE_RATIO * r.idle_median_ms and r.idle_rank_ms - r.idle_median_ms >= IDLE_MS)


def _outlier(x: RunOutlier) -> str:
    who = f"rank {x.rank}" if x.rank is not None else ""
    on = f" on {plural(x.ranks, 'rank')}" + (f" ({who} the most)" if who else "") if x.ranks > 1 else \
        (f" ({who})" if who else "")
    ex = x.time_ms - x.median_ms
    what = (f"longest step {x.step}{on}: {fmt(x.time_ms, 'ms')}, {fmt(x.time_ms / x.median_ms, 'x')} the median of "
            f"its steps ({fmt(x.median_ms, 'ms')})" if x.of_all else
            f"outlier step {x.step}{on}: {fmt(x.time_ms, 'ms')}, +{fmt(ex, 'ms')} over its median step after the "
            f"first ({fmt(x.median_ms, 'ms')})")
    text = what
    if x.held_by == "allocator":
        return text + f": the device idles {fmt(x.grew_ms, 'ms')} of it inside allocator calls (cudaMalloc/cudaFree)"
    if x.held_by == "runtime":
        return text + f": the device idles {fmt(x.grew_ms, 'ms')} more inside blocking runtime calls (copies, syncs)"
    if x.held_by == "stretch":
        return text + f": the device idles {fmt(x.grew_ms, 'ms')} of it under one host op `{short(x.op)}`"
    if not x.category:
        return text
    text += f"; on its critical path {CATEGORY_WORDS.get(x.category, x.category)} grew the most (+{fmt(x.grew_ms, 'ms')})"
    if x.category in HOST and x.op_grew_ms > 0:
        top = f"`{short(x.op)}`" if x.op else "time with no host op recorded"
        if x.op_grew_ms >= ONE_OP_SHARE * ex:
            text += f", one host op holding most of it: {top} +{fmt(x.op_grew_ms, 'ms')}"
        else:
            text += (f", spread over {plural(x.grown_ops, 'host op')} that each ran ≥ 20 % longer (the host slower "
                     f"in the whole step), {top} +{fmt(x.op_grew_ms, 'ms')} the most")
    return text
