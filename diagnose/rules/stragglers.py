"""The straggler finding (issue #34: its cause read from its own path before its late collective): a rank alone
last at one collective kind far above chance, or computing above its peers' noise. The decision is
metrics/job/stragglers.py's; this module words it."""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.critical_path_view import path_held_words
from llmdiag.diagnose.model.format import fmt, plural, ranges
from llmdiag.diagnose.rules.base import Ctx, severity_for
from llmdiag.diagnose.rules.waits import late_ranks, straggler_cause, where_peers_wait
from llmdiag.diagnose.metrics.job.stragglers import (STRAGGLER_ALPHA, STRAGGLER_FLOOR, binom_tail,
                                         compute_stragglers)


def _legacy_arrivals(sk, nsteps: float, n: int) -> dict[int, tuple[float, str]]:
    """Older summaries (no `skew.decided`): last arrivals pooled over kinds, binomial against 1/ranks, the
    summed lateness (or the share of the total skew) per step as a bound."""
    total_wait = sum(b.mean_skew_ms * b.matched for b in sk.by_collective) / nsteps
    late_by = sk.late_ms_by_rank or {}
    found = {}
    for rk, k in sk.last_arrivals.items():
        if sk.matched < 3 or k / sk.matched < 0.5:
            continue
        p = binom_tail(int(k), sk.matched, 1 / n)
        if p >= STRAGGLER_ALPHA:
            continue
        imposed = late_by[str(rk)] / nsteps if str(rk) in late_by else total_wait * k / sk.matched
        found[int(rk)] = (imposed, f"arrives last at {k} of {sk.matched} matched collectives "
                                   f"({fmt(k / sk.matched, 'pct')}; chance would be {fmt(1 / n, 'pct')}, p = {p:.1g}), "
                                   f"imposing {fmt(imposed, 'ms')} of waiting per step")
    return found


def stragglers(c: Ctx) -> list[Finding]:
    """A rank that makes the others wait: it arrives last at matched collectives far more often than chance
    (binomial test against 1/ranks), or computes longer than the median by more than the per-step noise. The
    gain credited is only the waiting it imposes on the others, never its own waits."""
    sk, step = c.a.skew, c.step_ms
    if not sk or not step or len(c.ranks) < 3:  # with two ranks one of them always arrives last
        return []
    nsteps = statistics.median([r.nsteps for r in c.ranks])
    # Who arrives late and what it costs is decided once (metrics/job/stragglers.py); the finding quotes it.
    late = {x.rank: x for x in sk.stragglers if x.kind and not sk.matching_failed}
    found: dict[int, tuple[float, str]] = {r: (x.gain_ms if x.gain_ms is not None else x.imposed_ms, x.reason)
                                           for r, x in late.items()}
    if not sk.decided:  # a summary written before the per-kind decision: its pooled counts, as it was read then
        found.update(_legacy_arrivals(sk, nsteps, len(c.ranks)))
    # Compute excess over the peers' median: decided with the rest in metrics/job/stragglers.py; an older
    # summary's is decided here the same way.
    comp = ([x for x in sk.stragglers if not x.kind] if sk.decided else
            compute_stragglers(c.ranks, c.a.pipeline, c.man, c.layout, c.a.moe, step, set(found)))
    found.update({x.rank: (x.gain_ms if x.gain_ms is not None else 0.0, x.reason) for x in comp
                  if x.rank not in found})
    stage_of = {b.rank: b.stage for b in (c.a.pipeline.stage_bubbles if c.a.pipeline else [])}
    if c.a.pipeline and c.man:
        stage_of.update({r.rank: min(c.man.stages_of(r.rank)) for r in c.ranks if c.man.stages_of(r.rank)})
    found = {r: v for r, v in found.items() if r in late or v[0] >= STRAGGLER_FLOOR * step}  # older summaries
    if not found:
        return []
    gain = min(max(v[0] for v in found.values()), step)
    known = {r.rank: r.host for r in c.ranks if r.host}
    where = lambda r: f"rank {r}" + (f" on host {known[r]}" if r in known else "")
    by_rank = {r.rank: r for r in c.ranks}
    causes = {}
    for r in found:
        peers = [p for p in c.ranks if p.rank not in found]
        if r in late and peers:
            causes[r] = straggler_cause(by_rank[r], peers, late[r].imposed_ms)
    windows = {w.rank: w for w in sk.capture_windows if w.lead_n}
    ev = "; ".join(f"{where(r)} {v[1]}" + (f"; {causes[r][0]}" if r in causes else "")
                   + (f"; its capture starts {plural(windows[r].lead_n, 'collective')} after the others' (left out of skew)"
                      if r in windows else "")
                   for r, v in sorted(found.items(), key=lambda kv: -kv[1][0])[:5])
    if len(found) > 5:
        ev += f"; and {len(found) - 5} more"
    arrivals = [r for r in found if str(r) in sk.last_arrivals]
    ev += "".join(f"; {x}" for x in (where_peers_wait(sk, nsteps, step, arrivals) if arrivals else "",
                                     late_ranks(sk) if arrivals else "", path_held_words(c.a, found)) if x)
    ev += f"; mean step {fmt(step, 'ms')} (the share's basis)"
    acts = []
    hosts = sorted({known[r] for r in found if r in known})
    if len(set(known.values())) > 1:
        check = "clocks/throttling (`nvidia-smi -q -d PERFORMANCE`), NIC errors" if c.gpu else "CPU frequency"
        more = f" and {len(hosts) - 5} more" if len(hosts) > 5 else ""
        acts.append(f"inspect host(s) {', '.join(hosts[:5])}{more}: {check}, other processes; replace or exclude "
                    "the node")
    staged = sorted({stage_of[r] for r in found if r in stage_of})
    if staged:
        acts.append(f"move layers off pipeline stage(s) {', '.join(map(str, staged))} (the straggler's compute "
                    "sets the pipeline's pace)")
    acts += [causes[r][1] for r in sorted(causes)][:5]
    uneven = sorted(r for r in found if r not in causes)
    if uneven:
        acts.append(f"look for uneven work (data, sequence lengths, layer split) on {'ranks' if len(uneven) > 1 else 'rank'} "
                    f"{ranges(uneven)}")
    top = max(found, key=lambda r: found[r][0])
    kind = "bound"
    if top in late and late[top].gain_kind == "simulated":
        kind = "estimate"
        eg = c.gain_text(gain, f"simulated: the matched collectives of all ranks replayed with rank {top}'s launch "
                         "gaps at its peers' median (metrics/job/straggler_replay.py)")
    else:
        eg = c.gain_text(gain, "the waiting the straggler alone imposes on the other ranks (its start − the "
                         "second-latest, where it is last), or its extra compute over the median", bound=True)
    from llmdiag.diagnose.simulate.gains import simulated_straggler_gain  # the replayed gain, where a graph exists

    if (sim := simulated_straggler_gain(c.a.whatif, found, step)) is not None:  # the replay, where one exists
        gain, eg, kind = sim[0], c.gain_text(*sim), "estimate"
    return [c.finding("stragglers", severity_for(gain, step), "Straggler ranks" if len(found) > 1 else "Straggler rank", ev, list(found), [],
                      "; ".join(acts), eg, gain, "skew.stragglers", gain_kind=kind,
                      events=["collective kernels matched across ranks", "compute kernels"])]
