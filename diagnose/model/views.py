"""Cross-rank views of an Analysis, each computed here once: every output prints these rows.

Conventions, stated in every output's table title:
- "per step" numbers divide a rank's total over its analysed steps by its step count;
- "mean over ranks" averages per-rank values over the ranks that have the thing (a collective group the
  rank takes part in, a kernel in the rank's top-K list); `ranks` says how many that was;
- ratios of time (overlap, share) are ratios of sums, so one long op is not hidden by many short ones.
"""

from __future__ import annotations

import math
from collections import defaultdict
from operator import attrgetter, truediv
from typing import TYPE_CHECKING

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.model.analysis import Analysis, MemoryStat, RankMetrics
from llmdiag.diagnose.model.devices import link_busbw_gbps, link_peak
from llmdiag.diagnose.model.fields import FIELDS
from llmdiag.diagnose.model.format import fmt, ranges
from llmdiag.diagnose.model.placement import device_name, hosts, ranks_per_host  # noqa: F401 (re-export)
from llmdiag.diagnose.model.roles import P2P_KINDS, pg_role

if TYPE_CHECKING:  # a one-rank report has no stragglers: model/skew.py (and matching) load only where one does
    from llmdiag.diagnose.model.skew import Straggler


def _mean(xs) -> float | None:
    xs = list(xs)
    return statistics.fmean(xs) if xs else None


# ---- communication per (kind, process group) ------------------------------------------------------------
@dataclass(frozen=True)
class CommGroupRow:
    kind: str
    pg: str  # "" when the trace does not name the group
    role: str  # dp, tp, pp, cp, ep or "?"
    ranks: int  # ranks that run this collective in this group
    group_size: int | None
    ops_per_step: float  # mean over those ranks
    time_ms_per_step: float  # summed op durations per step, mean over those ranks
    exposed_ms_per_step: float  # op time not under compute, per step, mean over those ranks
    overlap: float | None  # Σ overlapped / Σ op time over those ranks (duration-weighted)
    worst_overlap: float | None  # the lowest per-rank overlap ratio
    worst_rank: int | None
    msg_bytes: float | None  # mean message size over ops of known size
    algbw_gbps: float | None  # mean over ranks with sized ops
    busbw_gbps: float | None
    busbw_min_gbps: float | None
    busbw_min_rank: int | None
    of_link_peak: float | None  # busbw / the device's achievable link busbw, where the device is known


def _grouped(rows) -> dict[tuple, tuple[list, list, list]]:
    """(key, a, b, c) rows -> per key the lists of a, b and c, in row order: a table's three columns gathered
    in one pass (16,384 ranks × 20 kernels: unrolled, a generic per-value loop cost 3× as much)."""
    out: dict[tuple, tuple[list, list, list]] = {}
    for key, a, b, c in rows:
        cols = out.get(key)
        if cols is None:
            cols = out[key] = ([], [], [])
        cols[0].append(a)
        cols[1].append(b)
        cols[2].append(c)
    return out


def _exposed(kind: str, rs, total, over, ns) -> list[float]:
    """Per rank: the group's op time not under compute, per step, at most what the rank's step holds: its exposed
    communication (a union) for collectives, its step for send/recv (a CPU pipeline counts those as bubble, not
    exposed communication). Ops of one group that run at once (gloo runs collectives on several threads) would
    otherwise count their shared time twice: 343.68 ms exposed in a 210.11 ms step (issue 36)."""
    p2p = kind in P2P_KINDS
    return [min((t - o) / n, r.step_time_ms if p2p else r.exposed_comm_ms)
            for r, t, o, n in zip(rs, total, over, ns)]


def comm_by_group(a: Analysis) -> list[CommGroupRow]:
    """One row per (kind, process group) over all ranks, most time per step first. Each group's columns
    are read once (map over the records, 16,384 ranks × a few groups), the sums in rank order."""
    groups = _grouped(((c.kind, c.pg), r, c, r.nsteps) for r in a.ranks for c in r.comm_by_kind)
    peak = link_busbw_gbps(device_name(a))
    out = []
    for (kind, pg), (rs, cs, ns) in groups.items():
        total, over = list(map(_TOTAL, cs)), list(map(_OVERLAPPED, cs))
        ratio, busbw = list(map(_RATIO, cs)), list(map(_BUSBW, cs))
        tot, ov = sum(total), sum(over)
        rated = [i for i, v in enumerate(ratio) if v is not None]
        worst = min(rated, key=ratio.__getitem__) if rated else None  # the first of equal minima, as min() gives
        bws = [i for i, v in enumerate(busbw) if v is not None]
        low = min(bws, key=busbw.__getitem__) if bws else None
        sized = sum(map(_SIZED, cs))
        bw = _mean([busbw[i] for i in bws])
        algbw = [cs[i].algbw_gbps for i in bws]
        out.append(CommGroupRow(
            kind=kind, pg=pg, role=pg_role(kind, pg, cs[0].group_size, a.layout), ranks=len(cs),
            group_size=cs[0].group_size,
            ops_per_step=statistics.fmean(list(map(truediv, map(_COUNT, cs), ns))),
            time_ms_per_step=statistics.fmean(list(map(truediv, total, ns))),
            exposed_ms_per_step=statistics.fmean(_exposed(kind, rs, total, over, ns)),
            overlap=ov / tot if tot else None,
            worst_overlap=ratio[worst] if worst is not None else None,
            worst_rank=rs[worst].rank if worst is not None else None,
            msg_bytes=sum(map(_BYTES, cs)) / sized if sized else None,
            algbw_gbps=_mean([x for x in algbw if x is not None]), busbw_gbps=bw,
            busbw_min_gbps=busbw[low] if low is not None else None,
            busbw_min_rank=rs[low].rank if low is not None else None,
            of_link_peak=bw / peak if peak and bw is not None else None,
        ))
    return sorted(out, key=lambda g: (-g.time_ms_per_step, g.kind, g.pg))


_TOTAL, _OVERLAPPED, _RATIO, _BUSBW = (attrgetter(k) for k in ("total_ms", "overlapped_ms", "overlap_ratio",
                                                                 "busbw_gbps"))
_SIZED, _BYTES, _COUNT, _MAX_US, _RANK = (attrgetter(k) for k in ("sized_count", "bytes", "count", "max_us", "rank"))


def link_note(a: Analysis) -> str:
    """What the '% of link peak' column compares against, in words."""
    name = device_name(a)
    lp = link_peak(name)
    if lp is None:
        return (f"Link peak: n/a, the device ({name or 'not recorded'}) is not in llmdiag's link table "
                "(docs/metrics.md).")
    return (f"Link peak: {fmt(lp.busbw_gbps, 'gbps')} achievable bus bandwidth of {name} over {lp.link} (source: "
            f"{lp.source}), i.e. within one node; a group that spans nodes runs at its NICs' speed instead.")


def p2p_bubble_note(a: Analysis) -> str | None:
    """On CPU traces a blocked gloo send/recv is the pipeline bubble: the step breakdown and the headline count
    it as idle, while the per-op communication table still lists it with its 'exposed' time. Said beside both,
    in these words, so the two numbers are not read as a contradiction (docs/metrics.md, `idle`)."""
    if a.trace_kind != "cpu" or not any(c.kind in ("send", "recv") for r in a.ranks for c in r.comm_by_kind):
        return None
    return ("On CPU (gloo) a send or recv blocks until its peer posts the other side: that wait is the pipeline "
            "bubble, so the step breakdown and the headline count it as idle, not as exposed communication; the "
            "per-op communication table still lists it.")


def sampled_overlap_note(a: Analysis) -> str | None:
    """Beside the communication table where some rank's capture is event-sampled (RankChores.sampled_share): its
    overlap and exposed time are what the sample shows, and the compute under a collective may be among the
    dropped events, so they are not read as the job's (the exposure rules leave such ranks out:
    rules/comm_gain.py overlap_unmeasured). Our words and rank numbers only."""
    got = [r.rank for r in a.ranks if r.chores is not None and r.chores.sampled_share is not None]
    if not got:
        return None
    return (f"Rank{'s' if len(got) > 1 else ''} {ranges(got)}: event-sampled capture. Their overlap and exposed "
            "time are what the sample shows: compute kernels under a collective may be among the dropped events "
            "(so the exposure may be overstated), and whether the step waits on the communication cannot be told; "
            "no exposure finding is made on them.")


def comm_note(a: Analysis) -> str | None:
    """The notes printed under the communication table (terminal and report), None where none applies."""
    return " ".join(n for n in (p2p_bubble_note(a), sampled_overlap_note(a)) if n) or None


# ---- per step over ranks --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepRow:
    step: int
    ranks: int
    mean_ms: float  # mean over the ranks that have this step
    max_ms: float  # the slowest rank's time in this step
    max_rank: int


def per_step(a: Analysis) -> list[StepRow]:
    acc: dict[int, list] = defaultdict(list)
    for r in a.ranks:
        for st in r.steps:
            acc[st.step].append((st.time_ms, r.rank))
    rows = []
    for step in sorted(acc):
        xs = acc[step]
        t, rank = max(xs, key=lambda x: (x[0], -x[1]))
        rows.append(StepRow(step, len(xs), statistics.fmean([x[0] for x in xs]), t, rank))
    return rows


# ---- memory ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryRow:
    rank: int
    stat: MemoryStat

    @property
    def frac(self) -> float | None:
        return self.stat.used_frac


def memory_use(a: Analysis) -> list[MemoryRow]:
    """Every (rank, device), closest to capacity first (by bytes used where the capacity is unknown)."""
    rows = [MemoryRow(r.rank, m) for r in a.ranks for m in r.memory]
    return sorted(rows, key=lambda x: (x.frac is None, -(x.frac if x.frac is not None else x.stat.used), x.rank))


# ---- kernels --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelRow:
    name: str
    kind: str
    ranks: int  # ranks whose top-K list holds it
    ms_per_step: float  # mean over those ranks
    count_per_step: float
    mean_us: float | None
    max_us: float
    share: float | None  # Σ its time / Σ all kernel time, over those ranks


def _kernel_time_ms(r: RankMetrics) -> float | None:
    if r.kernel_time_ms:
        return r.kernel_time_ms
    k = next((k for k in r.top_kernels if k.share > 0), None)  # schema-1 summaries: from any kernel's share
    return k.total_ms / k.share if k else None


def kernel_table(a: Analysis, top: int | None = 20) -> list[KernelRow]:
    """Kernels (or top-level CPU ops) over ranks, most time per step first; the first `top` (all with None)."""
    # per rank once: its step count and kernel time (16,384 ranks × 20 kernels)
    acc = _grouped(((k.name, k.kind), k, n, kt) for r in a.ranks if r.top_kernels
                   for n, kt in ((r.nsteps, _kernel_time_ms(r)),) for k in r.top_kernels)
    rows = []
    for (name, kind), (ks, ns, denom) in acc.items():
        totals, counts = list(map(_TOTAL, ks)), list(map(_COUNT, ks))
        total, count = sum(totals), sum(counts)
        rows.append(KernelRow(
            name=name, kind=kind, ranks=len(ks), ms_per_step=statistics.fmean(list(map(truediv, totals, ns))),
            count_per_step=statistics.fmean(list(map(truediv, counts, ns))),
            mean_us=total * 1e3 / count if count else None, max_us=max(map(_MAX_US, ks)),
            share=total / sum(denom) if all(denom) else None))
    rows.sort(key=lambda x: (-x.ms_per_step, x.name))
    return rows if top is None else rows[:top]


# ---- ranks at a glance ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """min / median (lower) / p90 (nearest rank) / max of one per-rank value, each an exact value of one rank."""

    key: str
    min: tuple[float, int]  # (value, rank)
    median: tuple[float, int]
    max: tuple[float, int]
    p90: tuple[float, int] | None = None


# per-rank values shown as min / median / max: (label, RankMetrics attribute, unit, glossary entry); label and
# unit from the registry (model/fields.py)
DISTRIBUTIONS = [(FIELDS[k].label, k, FIELDS[k].unit, g) for k, g in (
    ("step_time_ms", "step_time"), ("compute_ms", "compute"), ("exposed_comm_ms", "exposed_comm"),
    ("exposed_comm_frac", "exposed_comm"), ("idle_frac", "idle"), ("overlap_ratio", "overlap_ratio"))]


def spread(a: Analysis, key: str) -> Spread | None:
    vals = sorted([x for x in zip(map(attrgetter(key), a.ranks), map(_RANK, a.ranks)) if x[0] is not None])
    if not vals:
        return None
    return Spread(key, vals[0], vals[(len(vals) - 1) // 2], vals[-1], vals[max(0, math.ceil(0.9 * len(vals)) - 1)])


def stragglers(a: Analysis) -> list[tuple[int, Straggler]]:
    """(index in skew.stragglers, straggler), largest value first then rank: the one order the terminal, the
    report and `--tables` show (the index is the straggler's JSON path, summary.json keeps the decided order)."""
    return sorted(enumerate(a.skew.stragglers if a.skew else []), key=lambda x: (-x[1].value, x[1].rank))
