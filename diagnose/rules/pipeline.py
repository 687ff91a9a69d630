"""Pipeline rules: a bubble above what the schedule needs, and stages of unequal work (listed in rules.RULES)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.metrics.rank.pipeline.actions import theory_bubble
from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

if TYPE_CHECKING:
    from llmdiag.diagnose.model.pipeline import PipelinePrediction, PipelineResult

IMBALANCE_FLOOR = 0.10  # busiest stage over the mean stage, − 1: above this pipeline_imbalance fires


def pipeline_bubble(c: Ctx) -> list[Finding]:
    """Bubble above the schedule formula or large -> more microbatches or a schedule with a smaller bubble."""
    p = c.a.pipeline
    if not p or p.stages < 2 or not p.window_ms:
        return []
    meas, theory, win, m = p.measured, p.theory, p.window_ms, p.microbatches
    # Unbalanced stages (pipeline_imbalance's finding) idle the lighter stages while they wait for the busiest
    # one: that idle is the imbalance, not the schedule's. Judge the bubble then on the busiest stage, the one
    # that sets the pace (with equal stages, the mean bubble).
    pace = meas
    if p.imbalance is not None and p.imbalance > IMBALANCE_FLOOR and p.stage_bubbles:
        pace = min(meas, 1 - max(b.busy_ms for b in p.stage_bubbles) / win)
    if not (pace > theory + 0.05 or pace > 0.20):
        return []
    ref = p.replay if p.replay is not None else theory
    # A setting is proposed for the bubble only if it shrinks the bubble: one faster for another reason (fewer
    # microbatches where each costs a fixed overhead) is not this finding's claim.
    cands = [x for x in _candidates(p, ref, c.local_batch())
             if x[0] < win and x[1].bubble is not None and x[1].bubble < ref]
    if not cands:
        return []
    # The gain comes from the simulation where it has one: a setting it replays beats one it does not (a
    # schedule without an order here keeps today's busy time, which the cost model says grows with m).
    simulated = [x for x in cands if x[1].step_ms]
    pool = simulated or cands
    best = min(pool, key=lambda x: x[0])
    same = [x for x in pool if x[1].schedule == p.schedule]
    easy = min(same, key=lambda x: x[0]) if same else None
    pick = easy if easy and (win - easy[0]) >= 0.7 * (win - best[0]) else best
    new, q, how = pick
    gain = win - new
    act = _setting(p, q)
    other = best if pick is not best else easy
    rest = [x for x in cands if not x[1].step_ms] if simulated else []
    if rest and (other is None or other is pick) and min(rest, key=lambda x: x[0])[0] < new:
        other = min(rest, key=lambda x: x[0])  # faster on paper: the second option, marked as not simulated
    if other is not None and other is not pick:  # two options: each with its own numbers, read alike
        act = "; or ".join(f"{_setting(p, x[1])} (bubble {fmt(x[1].bubble, 'pct')}, window ≈ {fmt(x[0], 'ms')}"
                           f"{_scaled(x[1], m)})" for x in (pick, other))
    worst = max(p.stage_bubbles, key=lambda b: b.measured) if p.stage_bubbles else None
    ev = (f"measured bubble {fmt(meas, 'pct')} vs {fmt(theory, 'pct')} from the {p.schedule} formula and "
          f"{fmt(p.replay, 'pct')} in the replay (p={p.stages}, m={m}); pipeline window {fmt(win, 'ms')}")
    if worst:
        ev += f"; worst {_stages(c, worst)} (rank {worst.rank}) {fmt(worst.measured, 'pct')}"
    ranks = [b.rank for b in p.stage_bubbles if b.measured > b.theory + 0.05] or [b.rank for b in p.stage_bubbles]
    rsel = [r for r in c.ranks if r.rank in set(ranks)]
    eg = c.gain_text(gain, f"bubble {fmt(ref, 'pct')} ({'replay' if p.replay is not None else 'formula'}) → "
                     f"{fmt(q.bubble, 'pct')} at {q.schedule} m={q.microbatches}; window {fmt(win, 'ms')} → "
                     f"{fmt(new, 'ms')} ({how})")
    return [c.finding("pipeline_bubble", severity_for(gain, c.step_ms), "Pipeline bubble larger than needed", ev,
                      ranks, steps_where(rsel), act, eg, gain, "pipeline.measured", **_provenance(c))]


def _candidates(p: PipelineResult, ref: float, limit: int | None) -> list[tuple[float, PipelinePrediction, str]]:
    """(predicted pipeline window, the prediction, how it was predicted) for every other setting worth naming:
    the replayed predictions where the analysis has them, else 2m, 4m and interleaving from the formula."""
    from llmdiag.diagnose.model.pipeline import PipelinePrediction  # a trace without a pipeline never gets here

    meas, win, m = p.measured, p.window_ms, p.microbatches
    excess = max(0.0, meas - ref)  # comm waits / host overhead: assumed to stay after the change
    busy = win * (1 - meas)
    preds = p.predictions
    base = next((q.step_ms for q in preds if q.schedule == p.schedule and q.microbatches == m and q.step_ms),
                p.replay_window_ms)
    own_busy = next((q.busy_ms for q in preds if (q.schedule, q.microbatches) == (p.schedule, m) and q.busy_ms), None)
    cands = []  # (new window, prediction, how)
    for q in preds:
        if (q.schedule, q.microbatches) == (p.schedule, m) or (limit and q.microbatches > limit):
            continue
        if q.step_ms and base:
            cands.append((win * q.step_ms / base, q, f"measured window × replayed pipeline time ratio "
                          f"{fmt(q.step_ms, 'ms')} / {fmt(base, 'ms')}"))
        elif q.bubble is not None:
            b = min(0.95, q.bubble + excess)
            cands.append((busy / (1 - b), q, "same busy time, bubble = prediction + today's excess over "
                          "the replay"))
        else:  # a schedule the replay does not simulate: its formula, or for zero-bubble today's bubble × m/m′
            b, how = ((ref * m / q.microbatches, "today's replayed bubble × m/m′ (fill and drain stay, the work grows)")
                      if q.theory == 0.0 else (q.theory, "formula (p−1)/(v·m+p−1)"))
            work, what = busy, "same busy time"
            if q.busy_ms and own_busy:  # the fitted cost model says how the busy time changes with m
                work = busy * q.busy_ms / own_busy
                what = (f"busy time × {fmt(q.busy_ms, 'ms')} / {fmt(own_busy, 'ms')} (the cost model's busiest "
                        f"stage at m={q.microbatches} and at m={m})")
            cands.append((work / (1 - min(0.95, b + excess)), replace(q, bubble=b), f"{how}, {what}; not simulated"))
    if not preds:
        pp, v = p.stages, max(1, p.stages_per_rank or 1)
        for sched, m2, vv in ((p.schedule, 2 * m, v), (p.schedule, 4 * m, v), ("interleaved1f1b", m, 2)):
            if (limit and m2 > limit) or (sched, vv) == (p.schedule, v) and m2 == m:
                continue
            if theory_bubble(sched, pp, m2, vv) == 0.0:  # zero-bubble: the formula's 0 is not reached at small m
                b, how = ref * m / m2, "today's replayed bubble × m/m′ (fill and drain stay, the work grows)"
            else:
                b, how = theory_bubble(sched, pp, m2, vv), "formula (p−1)/(v·m+p−1)"
            q = PipelinePrediction(schedule=sched, microbatches=m2, bubble=b, step_ms=None, theory=b)
            cands.append((busy / (1 - min(0.95, b + excess)), q, f"{how}, same busy time"))
    return cands


def _scaled(q: PipelinePrediction, m: int) -> str:
    """A replayed prediction's window is shown scaled to the measured window: the replayed number beside it, so
    the option reads as the number the pipeline section prints; any other option says it was not simulated."""
    if q.step_ms:
        return f": the replayed {fmt(q.step_ms, 'ms')} × measured / replayed window at m={m}"
    return "; not simulated"


def _setting(p: PipelineResult, q: PipelinePrediction) -> str:
    """The run options that turn the current pipeline into prediction `q`."""
    parts = []
    if q.schedule != p.schedule:
        v = " (2 stages per rank)" if q.schedule in ("interleaved1f1b", "zbv", "dualpipev") else ""
        parts.append(f"`--schedule {q.schedule}`{v}")
    if q.microbatches != p.microbatches:
        parts.append(f"`--microbatches {q.microbatches}`")
    return " ".join(parts)


def pipeline_imbalance(c: Ctx) -> list[Finding]:
    """One stage much busier than the mean stage: the slowest stage sets the pace of the whole pipeline."""
    p = c.a.pipeline
    if not p or p.imbalance is None or p.imbalance <= IMBALANCE_FLOOR or not p.stage_bubbles:
        return []
    sb = p.stage_bubbles
    hi, lo = max(sb, key=lambda b: b.busy_ms), min(sb, key=lambda b: b.busy_ms)
    mean = statistics.fmean(b.busy_ms for b in sb)
    gain = hi.busy_ms - mean
    ev = (f"{_stages(c, hi)} (rank {hi.rank}) busy {fmt(hi.busy_ms, 'ms')} per step vs mean {fmt(mean, 'ms')} "
          f"(imbalance {fmt(p.imbalance, 'pct')}); lightest {_stages(c, lo)} (rank {lo.rank}) {fmt(lo.busy_ms, 'ms')}")
    act = (f"move layers from {_stages(c, hi)} to {_stages(c, lo)} (the first and last stages also carry "
           "the embedding and the output layer + loss: give them fewer transformer layers)")
    eg = c.gain_text(gain, "slowest stage busy time → mean stage busy time")
    from llmdiag.diagnose.simulate.gains import simulated_stage_gain  # only past the checks: one rank never imports it

    if (sim := simulated_stage_gain(c.a.whatif, hi.stage, c.step_ms)) is not None:  # the replay, where one exists
        gain, eg = sim[0], c.gain_text(*sim)
    if (mv := p.layer_move) and mv["gain_ms"] > 0:  # the one-layer move, replayed with the run's cost model
        eg += (f"; moving one layer from stage {mv['src']} to stage {mv['dst']}: pipeline "
               f"{fmt(mv['step_ms'], 'ms')} per step (−{fmt(mv['gain_ms'], 'ms')}), an estimate that assumes the "
               "stage's layers cost the same (docs/simulation.md)")
    return [c.finding("pipeline_imbalance", severity_for(gain, c.step_ms), "Pipeline stages unbalanced", ev,
                      [hi.rank], steps_where([r for r in c.ranks if r.rank == hi.rank]), act, eg, gain,
                      "pipeline.imbalance", **_provenance(c))]


def _provenance(c: Ctx) -> dict:
    """Schedule and microbatches come from the manifest in an llmdiag run, else from the trace's own labels."""
    if c.man and c.man.pipeline:
        return {"source": "manifest", "events": ["manifest.pipeline", "PP:{stage}{F|B|W}{mb} spans"]}
    return {"source": "trace", "events": ["PP: spans or send/recv between stages", "compute kernels"]}


def _stages(c: Ctx, b) -> str:
    """"stage 3", or "stages 3, 7" for a rank holding virtual stages (read from its pipeline actions)."""
    held = sorted({x.stage for r in c.ranks if r.rank == b.rank for x in r.pipeline_actions}) or [b.stage]
    return f"stage {held[0]}" if len(held) == 1 else "stages " + ", ".join(map(str, held))
