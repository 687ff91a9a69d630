"""Device idle that two findings both take their gain from (issue #34): counted once.

Several rules take their gain from the device's idle per step: host_bound (the host-bound idle less what single
long host ops hold), host_op_stall (the idle each long host op holds: `ranks[].idle.stretches`), and the chores
(broadcast_buffers, zero_grad: the idle inside named host ops; pageable_copy: the idle after blocking copies),
host_sync (the idle in blocking runtime calls). Each finding's gain is split into *pieces*, the regions of the
idle breakdown it lies in, read from the metric fields that define it:

- `("host_rest", "*")`: host_bound's whole gain (host-bound idle outside every long-op stretch);
- `("stretch", op | stack, "*")`: a long host op's stretch (host_op_stall's, one per op and enclosing ops);
- a chore's idle (and optimizer_step's, inside `Optimizer.step#...` spans): the stretches whose op or enclosing
  ops are the chore's own ops (`_chore_stretches`, from the
  stretch's names and the chore's op names), then the rest of it, assumed host-bound idle outside the
  stretches: `("host_rest", chore)`. That assumption is the conservative one: the rest may also be queued or
  unattributed idle, which no other finding claims; counting it as shared can only lower a total.
- pageable_copy: its idle follows blocking copy calls, whose own idle is host_sync's: `("runtime", "pageable")`
  against host_sync's `("runtime", "*")` (the split inside the call and after it is not in the summary).
- stragglers: the straggler's host stalls in the ops launching its collectives (`ranks[].comm_host_stall`),
  `("stall", op)`, which its simulated gain removes; a long-op stretch of that op or under it on a shared rank
  is the same stalled host time (host_op_stall's device idle there).

Two pieces overlap where their regions are equal and one of them is the whole region ("*"), or both name the
same sub-region: by min(a, b). Different sub-regions (two chores' different ops) are disjoint. Findings are
taken in the order every output shows them; each one's overlap with those above it (their pieces not already
shared) is its `shared_ms`, said in its gain text ("X ms of it is part of the Y ms above"); one wholly inside
another is `part_of` it. Totals count gain_ms − shared_ms.
"""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal
from collections import defaultdict

from llmdiag.diagnose.model.analysis import SEVERITIES, Analysis, Finding, RankMetrics
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules.base import severity_for, stored_gain
from llmdiag.diagnose.rules.one_time import one_time

WHOLE = "*"
ALL_OF = 0.995  # shared at least this share of the gain: the finding is part of the other's time
PACK_OPS = ("aten::flatten_dense_tensors", "aten::unflatten_dense_tensors", "c10d::broadcast_")
DDP_FORWARD = "DistributedDataParallel.forward"
ZERO_GRAD = "Optimizer.zero_grad#"
OPT_STEP = "Optimizer.step#"
DDP_BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
Pieces = dict[tuple, float]
# Findings whose action names no switch of its own (profile the host, find what the op does): where their time lies
# in findings above with a specific action (a chore: broadcast_buffers, zero_grad, ...), they are graded by the time
# they add (nccl_data: a 24.9 ms host_op_stall in DDP's buffer unpacking, 22.5 ms of it broadcast_buffers' idle,
# read as a second high finding for the same time).
GENERIC = ("host_bound", "host_op_stall")


def _stretches(r: RankMetrics, recurring: bool = False) -> list:
    if r.idle is None:
        return []
    return [s for s in r.idle.stretches if s.cause == "host" and not (recurring and one_time(r, s))]


def _key(s) -> tuple:
    return ("stretch", s.op, tuple(s.stack[:3]))


def _chore_stretches(r: RankMetrics, chore: str) -> list:
    """The long-op stretches inside a chore's ops, by the stretch's op and the ops enclosing it."""
    out = []
    for s in _stretches(r):
        names = [s.op, *s.stack]
        if chore == "broadcast_buffers" and DDP_FORWARD in s.stack and any(n in PACK_OPS for n in names):
            out.append(s)
        elif chore == "zero_grad" and any(n.startswith(ZERO_GRAD) for n in names):
            out.append(s)
        elif chore == "optimizer_step" and any(n.startswith(OPT_STEP) for n in names):
            out.append(s)
        elif chore == "ddp_grad_copy" and any(n == DDP_BACK for n in names):
            out.append(s)
    return out


def _span_idle(r: RankMetrics, fid: str) -> float | None:
    """The device idle per step inside a chore's or the optimizer step's host ops; None: not such a finding."""
    if fid == "optimizer_step":
        return r.optimizer.idle_ms if r.optimizer is not None else None
    if fid == "ddp_grad_copy":  # its gain adds the copies' device time: only the idle part is shared
        return r.ddp_copies.back_idle_ms if r.ddp_copies is not None else None
    if fid in ("broadcast_buffers", "zero_grad") and r.chores is not None:
        return r.chores.buffer_idle_ms if fid == "broadcast_buffers" else r.chores.zero_grad_idle_ms
    return None


def _per_rank(a: Analysis, f: Finding) -> list[Pieces]:
    ranks = {r.rank: r for r in a.ranks}
    out = []
    for rank in f.evidence.ranks:
        r = ranks.get(rank)
        if r is None:
            continue
        p: Pieces = defaultdict(float)
        n = r.nsteps
        if f.id == "host_op_stall":
            for s in _stretches(r, recurring=True):
                p[_key(s) + (WHOLE,)] += s.idle_ms / n
        elif (idle := _span_idle(r, f.id)) is not None:
            left = idle
            for s in _chore_stretches(r, f.id):
                got = min(left, s.idle_ms / n)
                p[_key(s) + (WHOLE,)] += got
                left -= got
            if left > 0:
                p[("host_rest", f.id)] += left
        out.append(dict(p))
    return out


def pieces(a: Analysis, f: Finding) -> Pieces:
    """Where a finding's gain (ms per step) lies in the idle breakdown; {} where it is no idle of these kinds.
    Per-rank pieces are averaged over the finding's ranks, as its gain is, and scaled to add up to the gain."""
    g = f.gain_ms
    if g is None or g <= 0:
        return {}
    if f.id == "host_bound":
        return {("host_rest", WHOLE): g}
    if f.id == "host_sync":
        return {("runtime", WHOLE): g}
    if f.id == "pageable_copy":
        return {("runtime", "pageable"): g}
    if f.id == "held_read":  # the device's idle after the drain, before the host's next launches: host-bound idle
        return {("host_rest", WHOLE): g}
    if f.id == "stragglers":
        return _stalls(a, f, g)
    if f.id == "outlier_steps":  # its idle part, inside host_bound's mean (rules/outlier_steps.py)
        return __import__("llmdiag.diagnose.rules.outlier_steps", fromlist=["x"]).outlier_pieces(a, f)
    if f.id not in ("host_op_stall", "broadcast_buffers", "zero_grad", "optimizer_step", "ddp_grad_copy"):
        return {}
    per = _per_rank(a, f)
    if not per:
        return {}
    keys = {k for p in per for k in p}
    mean = {k: statistics.fmean(p.get(k, 0.0) for p in per) for k in keys}
    tot = sum(mean.values())
    if f.id == "ddp_grad_copy":  # the idle part as measured (the rest of its gain is device time, not idle)
        return {k: v * min(1.0, g / tot) for k, v in mean.items()} if tot > 0 else {}
    return {k: v * g / tot for k, v in mean.items()} if tot > 0 else {}


def _stalls(a: Analysis, f: Finding, g: float) -> Pieces:
    """A straggler's gain replays its launch gaps at its peers' speed: the host stalls in the ops that launch its
    collectives (`ranks[].comm_host_stall`: the op holding the most, and the next) are part of it, each at most
    the gain."""
    ranks = {r.rank: r for r in a.ranks}
    p: Pieces = defaultdict(float)
    got = [h for x in f.evidence.ranks if x in ranks and (h := ranks[x].comm_host_stall) is not None]
    for h in got:
        for op, ms in ((h.op, h.op_ms_per_step), (h.next_op, h.next_ms_per_step)):
            if op and ms > 0:
                p[("stall", op)] += min(ms, g) / len(got)
    return dict(p)


def _overlap(k1: tuple, k2: tuple) -> bool:
    """Same region, and one of the two is all of it or both the same part of it; a straggler's host stall in an
    op and a long-op stretch of that op, or under it (the same host time: its device idle, its late launch)."""
    if k1[0] == "stall" or k2[0] == "stall":
        (st, other) = (k1, k2) if k1[0] == "stall" else (k2, k1)
        if other[0] == "stall":
            return st == other
        return other[0] == "stretch" and (other[1] == st[1] or st[1] in other[2])
    return k1[:-1] == k2[:-1] and (k1[-1] == WHOLE or k2[-1] == WHOLE or k1[-1] == k2[-1])


def share_idle(a: Analysis, fs: list[Finding]) -> None:
    """Set `shared_ms` (and `part_of` where all of it is shared) on findings whose idle pieces lie in the pieces of
    findings shown above them, with words in the gain text; findings already part of another are left alone. A
    GENERIC finding whose time lies mostly in specific findings above is first graded by the time it adds (a
    first pass), and the sharing is then read in the order that grading gives."""
    for f, adds in _share(a, fs, write=False):
        if not f.gain_ms or not f.gain_frac:
            continue
        sev = severity_for(adds, f.gain_ms / f.gain_frac)
        if SEVERITIES.index(sev) > SEVERITIES.index(f.severity):
            f.severity = sev
            f.expected_gain += (f"; rated {sev}, not by its whole gain: findings above with an action of their own "
                                f"hold {fmt(f.gain_ms - adds, 'ms')} of it")
    _share(a, fs, write=True)


def _share(a: Analysis, fs: list[Finding], write: bool) -> list[tuple[Finding, float]]:
    """One pass of share_idle in the findings' order; with `write`, the findings are marked, else only the GENERIC
    ones sharing with specific findings are returned with the time they add."""
    regrade: list[tuple[Finding, float]] = []
    left: list[tuple[Finding, Pieces]] = []  # findings above, each with its pieces not yet shared
    for f in sorted((f for f in fs if f.gain_ms is not None and f.part_of is None), key=Finding.order_key):
        mine = dict(pieces(a, f))
        g = f.gain_ms
        if not mine or g is None:
            continue
        by: dict[str, float] = defaultdict(float)
        for k, theirs in left:
            if not set(k.evidence.ranks) & set(f.evidence.ranks):
                continue
            for kk in list(theirs):
                for mk in list(mine):
                    if not _overlap(kk, mk):
                        continue
                    x = min(theirs[kk], mine[mk])
                    if x <= 0:
                        continue
                    by[k.id] += x
                    theirs[kk] -= x
                    mine[mk] -= x
        left.append((f, mine))
        shared = min(sum(by.values()), g)
        if shared <= 1e-9:
            continue
        if not write:
            if f.id in GENERIC and not set(by) & set(GENERIC):
                regrade.append((f, g - shared))
            continue
        f.shared_ms = shared = stored_gain(shared)
        above = {k.id: k for k, _ in left}
        parts = [f"{fmt(x, 'ms')} {'is part' if j == 0 else ''} of the {fmt(above[i].gain_ms, 'ms')} above (`{i}`)"
                 .replace("  ", " ") for j, (i, x) in enumerate(sorted(by.items(), key=lambda kv: -kv[1]))]
        words = " and ".join(parts)
        same = "the same host stall" if "stragglers" in by or f.id == "stragglers" else "the same device idle"
        if shared >= ALL_OF * g:
            f.part_of = max(by, key=lambda i: by[i])
            f.expected_gain += f"; of it, {words}: {same}, not counted again"
        else:
            f.expected_gain += (f"; of it, {words}: {same}, counted once, so it adds {fmt(g - shared, 'ms')} "
                                "per step")
    return regrade
