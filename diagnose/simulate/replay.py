"""The pipeline replay: a schedule's dependency graph with measured durations, run by the one what-if engine
(diagnose.simulate.engine).

Each rank runs its actions in a fixed order; F(s, mb) waits for F(s−1, mb), B/I(s, mb) for F(s, mb) and
B/I(s+1, mb), W(s, mb) for B/I(s, mb). The replay of the observed order has free communication: its makespan
and idle time are the schedule's inherent bubble given the measured stage costs (measured − replay is what
communication, host overhead and noise add; replay − formula is what stage imbalance adds). Fed with
generated orders (gpipe, 1f1b, Megatron's interleaved 1F1B) it predicts other microbatch counts and schedules
with the cost model fitted from the run (diagnose.simulate.predict: fixed and variable action cost, messages
per link as nodes on the cross-stage edges); schedules it has no order for (zero-bubble, interleaving with m
not a multiple of p) are not simulated, and their predictions carry the formula in `theory` only (`bubble`
None).

`complete_pipeline` fills the replay into the PipelineResult that metrics (diagnose.metrics.pipeline_bubbles)
measured: the replay sits one stage above metrics, beside the rest of the what-if.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from llmdiag.diagnose.metrics.rank.pipeline.actions import Action, theory_bubble
from llmdiag.diagnose.metrics.job.state import Job
from llmdiag.diagnose.model.analysis import PipelinePrediction, PipelineResult
from llmdiag.diagnose.model.format import NS_PER_MS, pipeline_explanation
from llmdiag.diagnose.simulate.engine import CycleError, GraphBuilder, simulate, simulate_many
from llmdiag.diagnose.simulate.layers import move_one_layer, stage_layers
from llmdiag.diagnose.simulate.predict import SAMPLES, CostModel, fit

Key = tuple[int, str, int]  # (stage, kind, microbatch)
SIMULATED = ("gpipe", "1f1b")  # the schedules predicted at every microbatch count


@dataclass
class ReplayResult:
    makespan: float
    busy: dict[int, float]  # rank -> busy time
    bubble: dict[int, float]  # rank -> 1 − busy / makespan


def replay(orders: dict[int, list[Key]], dur: dict[Key, float], last_stage: int,
           link_ms: dict[tuple[int, int], float] | None = None,
           spread: dict[Key, np.ndarray] | None = None) -> ReplayResult | None:
    """Simulate; None if the orders deadlock (an order the dependencies cannot satisfy, or an action waiting
    for one that no rank runs). `link_ms`: the message on each stage pair's edge: a node on no rank's timeline
    that starts once the send is posted (the producing action ended) and the recv is posted (the receiver
    finished the action before the consuming one), as NCCL and gloo pair them; None or a missing pair: free.
    `spread`: per action, deviations (ms) its duration takes at random; the makespan is then the mean over
    SAMPLES replays (seeded: the same answer every time), each action its duration plus a drawn deviation.
    A schedule's ranks wait on each other, so a step with varying actions lasts longer than one with every
    action at its mean (the makespan is a maximum over paths)."""
    ids: dict[Key, int] = {}
    for order in orders.values():
        for a in order:
            ids.setdefault(a, len(ids))
    prev = {y: x for order in orders.values() for x, y in zip(order, order[1:])}
    edges, msgs = [], []
    for a, i in ids.items():
        for d in _deps(a, last_stage, dur):
            if d not in ids:
                return None
            lk = (link_ms or {}).get((d[0], a[0])) if d[0] != a[0] else None
            if lk is None:
                edges.append((i, ids[d]))
            else:  # a message node: once the send (d done) and the recv (a's rank reaching a) are posted
                msgs.append(lk)
                j = len(ids) + len(msgs) - 1
                edges += [(j, ids[d]), (i, j)] + ([(j, ids[prev[a]])] if a in prev else [])
    b = GraphBuilder(len(ids) + len(msgs))
    for order in orders.values():
        b.chain([ids[a] for a in order])
    for after, before in edges:
        b.dep(after, before)
    d = np.array([dur.get(a, 0.0) for a in ids] + msgs, dtype=np.float64)
    zero = np.zeros(len(d))
    draws = [(i, v) for a, i in ids.items() if (v := (spread or {}).get(a)) is not None and len(v) and v.any()]
    try:
        if draws and len(d):
            rng = np.random.default_rng(0)
            many = np.repeat(d[:, None], SAMPLES, axis=1)
            for i, v in draws:
                many[i] += rng.choice(v, SAMPLES)
            makespan = float(simulate_many(b.build(), np.maximum(many, 0.0)).max(axis=0).mean())
        else:
            _, end = simulate(b.build(), d, zero, zero)
            makespan = float(end.max()) if len(end) else 0.0
    except CycleError:
        return None
    busy = {r: sum(dur.get(a, 0.0) for a in o) for r, o in orders.items()}
    bubble = {r: (1 - busy[r] / makespan) if makespan > 0 else 0.0 for r in orders}
    return ReplayResult(makespan, busy, bubble)


def _deps(a: Key, last_stage: int, dur: dict[Key, float]) -> list[Key]:
    s, k, mb = a
    if k == "F":
        return [(s - 1, "F", mb)] if s > 0 else []
    if k in ("B", "I"):
        deps = [(s, "F", mb)]
        if s < last_stage:
            nxt = (s + 1, "I", mb) if (s + 1, "I", mb) in dur else (s + 1, "B", mb)
            deps.append(nxt)
        return deps
    if k == "W":
        return [(s, "I", mb)] if (s, "I", mb) in dur else [(s, "B", mb)]
    return []


def generate_order(schedule: str, stage: int, p: int, m: int, v: int = 1) -> list[Key] | None:
    """The action order of pipeline rank `stage` for gpipe, 1f1b, or interleaved 1F1B with v model chunks
    (Megatron-LM's order: chunk c of rank r is stage c·p + r; m a multiple of p); None for others."""
    s = schedule.lower()
    if s == "gpipe":
        return [(stage, "F", i) for i in range(m)] + [(stage, "B", i) for i in range(m)]
    if s == "1f1b":
        warm = min(p - 1 - stage, m)
        order = [(stage, "F", i) for i in range(warm)]
        for i in range(m - warm):
            order += [(stage, "F", warm + i), (stage, "B", i)]
        order += [(stage, "B", i) for i in range(m - warm, m)]
        return order
    if s == "interleaved1f1b" and v >= 2 and m % p == 0:
        return _interleaved(stage, p, m, v)
    return None


def _interleaved(rank: int, p: int, m: int, v: int) -> list[Key]:
    """Warm-up of (p − rank − 1)·2 + (v − 1)·p forwards (all of them when m = p), then one forward and one
    backward alternately; virtual microbatch k runs chunk (k mod p·v) div p (backward: the reverse) of
    microbatch (k div p·v)·p + k mod p."""
    total = m * v
    warm = total if m == p else min((p - rank - 1) * 2 + (v - 1) * p, total)

    def key(k: int, fwd: bool) -> Key:
        c = (k % (p * v)) // p
        c = c if fwd else v - 1 - c
        return (c * p + rank, "F" if fwd else "B", (k // (p * v)) * p + k % p)

    order = [key(k, True) for k in range(warm)]
    for i in range(total - warm):
        order += [key(warm + i, True), key(i, False)]
    return order + [key(k, False) for k in range(total - warm, total)]


def predict(schedule: str, p: int, m: int, stage_cost: dict[tuple[int, str], float], v: int = 1,
            link_ms: dict[tuple[int, int], float] | None = None,
            spread: dict[tuple[int, str], np.ndarray] | None = None) -> ReplayResult | None:
    """Replay `schedule` at m microbatches; stage_cost is the time of one microbatch's F or B on each pipeline
    rank (v = 1), split evenly over its v chunks when interleaved; link_ms the message between neighbouring
    ranks (interleaved: between the ranks holding the two chunks)."""
    orders = {}
    for r in range(p):
        o = generate_order(schedule, r, p, m, v)
        if o is None:
            return None
        orders[r] = o
    chunks = v if schedule.lower() == "interleaved1f1b" else 1
    dur = {a: stage_cost.get((a[0] % p, a[1]), 0.0) / chunks for o in orders.values() for a in o}
    links = None
    if link_ms:
        links = {(s, t): link_ms.get((s % p, t % p), 0.0) for s in range(chunks * p) for t in (s - 1, s + 1)
                 if 0 <= t < chunks * p}
    dev = None
    if spread:  # a chunk is 1/v of its stage's action, its deviations too
        dev = {a: spread[k] / chunks for a in dur if (k := (a[0] % p, a[1])) in spread}
    return replay(orders, dur, chunks * p - 1, links, dev)


def complete_pipeline(res: PipelineResult, actions: dict[int, list[Action]], oversubscribed: bool = False,
                      costs: tuple[dict, dict, dict] | None = None, layers: list[int] | None = None) -> None:
    """The replay of each pipeline replica's observed order, the predictions, and the explanation that reads
    them (written here, once, from the finished result), filled into `res` (whose measured numbers metrics computed over the same actions and groups).
    `costs`: per rank the actions' fixed host ns, the host send/recv records and the clock shift (ns)."""
    windows, per_rank = [], {}
    for group in res.groups:
        g = [r for r in group if actions.get(r)]
        if not g:
            continue
        steps = sorted(set.intersection(*[{a.step for a in actions[r]} for r in g]))
        rep = _replay_group(g, actions, steps) if steps else None
        if rep is not None:
            windows.append(rep.makespan)
            per_rank.update(rep.bubble)
    for b in res.stage_bubbles:
        b.replay = per_rank.get(b.rank)
    reps = [b.replay for b in res.stage_bubbles if b.replay is not None]
    res.replay = float(np.mean(reps)) if reps else None
    res.replay_window_ms = float(np.mean(windows)) if windows else None
    first = res.groups[0] if res.groups else sorted(actions)
    res.predictions, model = _predictions(actions, first, res.schedule, res.stages, res.microbatches,
                                          res.stages_per_rank, costs)
    if model is not None:
        res.prediction_model = model.describe(res.microbatches)
        own = [q for q in res.predictions if (q.schedule, q.microbatches) == (res.schedule, res.microbatches)]
        if own and own[0].step_ms and res.window_ms > 0:
            res.prediction_error = own[0].step_ms / res.window_ms - 1
        if layers and (mv := move_one_layer(model, predict, res.schedule, res.stages, res.microbatches, layers)):
            res.layer_move = {"src": mv.src, "dst": mv.dst, "step_ms": mv.step_ms, "gain_ms": mv.gain_ms}
    res.explanation = pipeline_explanation(res, oversubscribed)


def _replay_group(g: list[int], actions: dict[int, list[Action]], steps: list[int]) -> ReplayResult | None:
    """Replay the first complete step's observed order with per-action durations averaged over steps."""
    durs: dict[tuple, list[float]] = defaultdict(list)
    for r in g:
        for a in actions[r]:
            durs[(a.stage, a.kind, a.microbatch)].append((a.end - a.start) / NS_PER_MS)
    dur = {k: float(np.mean(v)) for k, v in durs.items()}
    orders = {}
    for r in g:
        first = sorted((a for a in actions[r] if a.step == steps[0]), key=lambda a: a.start)
        orders[r] = [(a.stage, a.kind, a.microbatch) for a in first]
    return replay(orders, dur, max(k[0] for k in dur))


def _predictions(actions, group, schedule, p, m, v, costs=None) -> tuple[list[PipelinePrediction], CostModel | None]:
    """Replayed bubble and pipeline time at other microbatch counts (same global batch) for the schedules the
    replay has an order for, with the run's fitted cost model (diagnose.simulate.predict): fixed and variable
    action cost, host overhead per action, messages per link. Zero-bubble rows (and interleaving with m not
    a multiple of p) carry only their formula (`bubble` None)."""
    if v != 1 or not any(actions.get(r) for r in group):
        return [], None
    fixed_ns, host, shift = costs or ({}, {}, {})
    model = fit(actions, fixed_ns, host, shift, group, m)
    out = []
    for sched in SIMULATED:
        for m2 in sorted({max(1, m // 2), m, 2 * m, 4 * m, 8 * m}):
            cost, links = model.durations(m, m2)
            rep = predict(sched, p, m2, cost, link_ms=links, spread=model.spread)
            if rep is None:
                continue
            out.append(PipelinePrediction(schedule=sched, microbatches=m2,
                                          bubble=float(np.mean(list(rep.bubble.values()))),
                                          step_ms=rep.makespan, theory=theory_bubble(sched, p, m2),
                                          busy_ms=_busiest(cost, m2)))
    for sched, vv in (("interleaved1f1b", 2), ("zbv", 2)):
        for m2 in sorted({m, 2 * m}):
            cost, links = model.durations(m, m2)
            rep = predict(sched, p, m2, cost, vv, link_ms=links, spread=model.spread)
            # no order for zero-bubble (or interleaving with m not a multiple of p): the formula, never as a replay
            out.append(PipelinePrediction(schedule=sched, microbatches=m2,
                                          bubble=float(np.mean(list(rep.bubble.values()))) if rep else None,
                                          step_ms=rep.makespan if rep else None,
                                          theory=theory_bubble(sched, p, m2, vv), busy_ms=_busiest(cost, m2)))
    return out, model


def _busiest(cost: dict[tuple[int, str], float], m2: int) -> float | None:
    """The busiest stage's action time per step at m2 microbatches under the cost model (a rank holding v
    chunks of a stage does that stage's work): what a schedule without a replay here still has to run."""
    per: dict[int, float] = defaultdict(float)
    for (stage, _), ms in cost.items():
        per[stage] += ms * m2
    return max(per.values()) if per else None


def complete_from_job(job: Job) -> PipelineResult | None:
    """The pipeline resolution measured (job.pipeline), completed by `complete_pipeline` on a copy (the Job is
    left as resolved): the Job's kept ranks, their staged actions and clock shifts (metrics/job/state.py), not
    worked out again from the raw outputs. None without a pipeline."""
    if job.pipeline is None:
        return None
    res = copy.deepcopy(job.pipeline)  # stage bubbles and predictions: a few per rank
    fixed, host = {}, {}
    for o in job.ranks:
        if (acts := job.actions.get(o.rank)) is not None:
            # host costs are per parsed action: paired where the staged actions are those (virtual stages re-cut them)
            same = len(o.actions) == len(acts) and all(a.start == b.start and a.end == b.end for a, b in zip(o.actions, acts))
            fixed[o.rank] = o.action_fixed_ns if same and len(o.action_fixed_ns) == len(acts) else []
            # gloo's host spans carry the bytes; device send/recv (o.p2p) only their span: latency alone
            host[o.rank] = o.host_p2p or [(k, s, e, 0) for _, k, _, s, e in o.p2p]
    complete_pipeline(res, job.actions, job.oversubscribed, (fixed, host, job.shift_ns), stage_layers(job.manifest))
    return res
