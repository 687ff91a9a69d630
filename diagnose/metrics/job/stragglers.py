"""Who is a straggler at matched collectives, and what it costs: the one place that decides (terminal, report,
JSON, tables and the finding all read SkewResult.stragglers).

Per (group, kind), per rank: the collectives at which it alone arrived last, and the wait it imposed there:
its start − the second-latest start (what every other rank would have saved had it alone been on time).
Pooling kinds hides a rank late at every all_to_all behind the all_reduces it is punctual at, so the test is
per kind (over all its collectives, and over those with a material skew): a rank is a straggler where, in some
kind with at least three such collectives over groups of at least three ranks, it arrives last far more often
than chance (binomial tail against 1/ranks below
STRAGGLER_ALPHA) and at half of them or more, and the wait it imposes over all kinds is at least
STRAGGLER_FLOOR of the step. Its gain is the replayed step with its launch gaps at its peers' median
(metrics/job/straggler_replay.py, "simulated"), else the imposed wait ("bound").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from llmdiag.diagnose.model.format import NS_PER_MS, fmt

if TYPE_CHECKING:
    from llmdiag.diagnose.model.skew import Straggler

STRAGGLER_ALPHA = 0.01  # binomial test level for "arrives last" against chance (1/ranks)
STRAGGLER_FLOOR = 0.02  # imposed waiting below 2 % of the step is not worth a finding
MIN_SHARE = 0.5  # last at half of a kind's matched collectives or more
MATERIAL = 0.01  # a collective whose arrival skew is ≥ 1 % of the step is one where a wait is worth counting
MAX_NAMED_KINDS = 3


def binom_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p): how likely a rank arrives last this often by chance.

    In log space (math.lgamma), so no term overflows at any n (math.comb(n, i) * p**i did past n ≈ 1,000), and
    summed only while terms still count: away from the mode each term is the previous one times
    (n - i) / (i + 1) · p / (1 - p), so the sum stops after O(√(np) + log) terms, not n."""
    if k <= 0 or p >= 1:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    odds = p / (1 - p)

    def log_pmf(i: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq

    if k > (n + 1) * p:  # k above the mode: terms fall from k upward
        s, t, i = 1.0, 1.0, k
        while i < n:
            t *= (n - i) / (i + 1) * odds
            s += t
            i += 1
            if t < s * 1e-17:
                break
        return min(1.0, math.exp(log_pmf(k)) * s)
    # k at or below the mode: 1 - P(X ≤ k - 1), whose terms fall from k - 1 downward
    s, t, i = 1.0, 1.0, k - 1
    while i > 0:
        t *= i / (n - i + 1) / odds
        s += t
        i -= 1
        if t < s * 1e-17:
            break
    return max(0.0, 1.0 - math.exp(log_pmf(k - 1)) * s)


def last_and_imposed(start: np.ndarray, seg: np.ndarray, size: np.ndarray, group: np.ndarray,
                     blamed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: is it the unique last arrival of its collective (among `blamed` collectives), and the wait it
    imposed there (its start − the second-latest start; 0 elsewhere)."""
    hi = np.maximum.reduceat(start, seg)
    at_hi = start == hi[group]
    alone = (np.add.reduceat(at_hi.astype(np.int64), seg) == 1) & blamed & (size >= 2)
    last = at_hi & alone[group]
    second = np.maximum.reduceat(np.where(at_hi, np.iinfo(np.int64).min, start), seg)
    imposed = np.where(last, start - second[group], 0)
    return last, imposed


def decide(keys: list[tuple[str, str]], rank: np.ndarray, key: np.ndarray, last: np.ndarray, imposed: np.ndarray,
           seg: np.ndarray, size: np.ndarray, blamed: np.ndarray, nsteps: float, step_ms: float | None,
           label, spread: np.ndarray | None = None) -> tuple[list[Straggler], dict[int, float]]:
    """(stragglers, rank -> imposed ms per step over all kinds). `label` names a group for the reason text.

    Per kind the count is taken twice: over all its matched collectives, and over those whose arrival skew
    (`spread`, ns per collective) is material (≥ MATERIAL of the step): a rank stalled before one collective
    of a step is last at every material one, while the jitter of the others dilutes its count over all."""
    from llmdiag.diagnose.model.skew import Straggler

    if not len(seg) or not nsteps:
        return [], {}
    rows = np.flatnonzero(last)
    ids, ri = np.unique(rank[rows], return_inverse=True)
    per_rank_imposed = np.bincount(ri, imposed[rows], len(ids)) / NS_PER_MS / nsteps
    imposed_by = {int(r): float(v) for r, v in zip(ids.tolist(), per_rank_imposed.tolist())}
    floor = STRAGGLER_FLOOR * step_ms if step_ms else 0.0
    g_k = np.zeros(len(keys), np.int64)
    np.maximum.at(g_k, key[seg], size)
    found: dict[int, list] = {}
    sets = [(blamed, "")]
    if spread is not None and step_ms:
        sets.append((blamed & (spread >= MATERIAL * step_ms * NS_PER_MS), " with material skew"))
    for chosen, what in sets:
        n_k = np.bincount(key[seg][chosen], minlength=len(keys))
        mine = chosen[np.repeat(np.arange(len(seg)), size)][rows]  # the last arrivals inside this set
        pair = key[rows][mine] * (len(ids) + 1) + ri[mine]
        up, cnt = np.unique(pair, return_counts=True)
        for pk, c in zip(up.tolist(), cnt.tolist()):
            k, j = divmod(pk, len(ids) + 1)
            n, g = int(n_k[k]), int(g_k[k])
            if n < 3 or g < 3 or c / n < MIN_SHARE:
                continue
            p = binom_tail(c, n, 1 / g)
            if p < STRAGGLER_ALPHA and not any(x[0] == k for x in found.get(int(ids[j]), [])):
                found.setdefault(int(ids[j]), []).append((k, c, n, g, p, what))
    out = []
    for r, kinds in found.items():
        imp = imposed_by.get(r, 0.0)
        if imp < floor:
            continue
        kinds.sort(key=lambda x: (x[4], -x[1]))
        k, c, n, g, p, _ = kinds[0]
        where = "; ".join(f"{c} of {n} {keys[k][1]}" + (f" on pg '{label(keys[k][0])}'" if keys[k][0] else "") + w
                          + f" (chance {fmt(1 / g, 'pct')}, p = {p:.1g})" for k, c, n, g, p, w in kinds[:MAX_NAMED_KINDS])
        out.append(Straggler(r, f"arrives last at {where}; imposing {fmt(imp, 'ms')} of waiting per step",
                             c / n, kind=keys[k][1], imposed_ms=imp, last_n=c, matched_n=n))
    out.sort(key=lambda s: (-s.imposed_ms, s.rank))
    return out, imposed_by


def _spread(r) -> float:
    """Per-step standard deviation of a rank's compute: the noise a difference between ranks must beat."""
    xs = [st.compute_ms for st in r.steps]
    if len(xs) < 2:
        return 0.0
    m = math.fsum(xs) / len(xs)  # float arithmetic: statistics.stdev's exact Fractions cost 1 s per 4k ranks
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return (xs[(n - 1) // 2] + xs[n // 2]) / 2 if n else 0.0


def compute_stragglers(ranks, pipeline, man, layout: dict | None, moe, step_ms: float | None,
                       exclude: set[int]) -> list[Straggler]:
    """Ranks whose compute per step exceeds their peers' median by more than max(2 × the median per-step noise,
    5 %) and by STRAGGLER_FLOOR of the step. Peers do the same work: ranks of one pipeline stage (stages differ
    by design: pipeline_imbalance), compute without the expert part an MoE router hands out (moe_imbalance).
    With a pipeline (analysed, or only named by the layout: pp > 1) a rank whose stage is unknown has no
    known peers and is not compared: the last stage's LM head and loss are stage imbalance."""
    if not step_ms or len(ranks) < 3:
        return []
    from llmdiag.diagnose.model.skew import Straggler  # (not imported for one or two ranks)

    piped = bool(pipeline) or int((layout or {}).get("pp") or 1) > 1
    stage_of = {b.rank: b.stage for b in (pipeline.stage_bubbles if pipeline else [])}
    if pipeline and man:
        stage_of.update({r.rank: min(man.stages_of(r.rank)) for r in ranks if man.stages_of(r.rank)})
    expert = {m.rank: m.expert_ms for m in (moe.ranks if moe else [])}
    comp = {r.rank: r.compute_ms - expert.get(r.rank, 0.0) for r in ranks}
    peers: dict = {}
    for r in ranks:
        peers.setdefault(stage_of.get(r.rank, -1 if piped else 0), []).append(r.rank)
    noise = _median([_spread(r) for r in ranks])
    medians = {key: _median([comp[x] for x in group]) for key, group in peers.items()}  # once per group
    out = []
    for r in ranks:
        key = stage_of.get(r.rank, -1 if piped else 0)
        if key == -1 or len(peers[key]) < 3 or r.rank in exclude:  # no known peers, or too few for a median
            continue
        med = medians[key]
        excess = comp[r.rank] - med
        if med > 0 and excess > max(2 * noise, 0.05 * med) and excess >= STRAGGLER_FLOOR * step_ms:
            out.append(Straggler(r.rank, f"computes {fmt(excess, 'ms')} per step more than the median rank "
                                         f"({fmt(excess / med, 'pct')}; per-step noise {fmt(noise, 'ms')})",
                                 excess / med, gain_ms=excess, gain_kind="bound"))
    return out
