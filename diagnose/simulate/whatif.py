"""What-if analysis over a dependency graph (the method of the OSDI'25 straggler study, §3–4).

From the measured ops it derives each op's launch delay (its start minus the end of its last dependency,
or minus the step's start) and, for ops of a synchronisation group, its transfer time (its end minus the
last member's start: the part that is not waiting). Then it replays the graph:
- with everything measured (validation: the replay must give the traced step back);
- without launch delays (`no_delay`): the job as traced, straggling included;
- ideal: every op at its op type's typical duration over all workers and steps (compute and other local
  ops: the mean; communication transfers: the median), no launch delays.
S = mean no-delay step / mean ideal step. A contribution restores one group of ops to their measured
durations in the ideal job. M_S and M_W make one set of ops ideal in the traced job and say which share of
(traced − ideal) that removes. Every replay is one linear pass of diagnose.simulate.engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmdiag.diagnose.model.whatif import Contribution, WhatIf, WorkerGain
from llmdiag.diagnose.simulate.engine import Graph, simulate

NEG_CLAMP_MS = 10.0  # a launch delay or transfer below −10 ms is clock error and becomes 0 (the artifact's EPS)
MW_SHARE = 0.03  # M_W makes the worst 3 % of workers ideal (at least one)
GAIN_CANDIDATES = 4  # workers given a "what if it ran at its peers' speed" replay: the best-scored ones
# Op visits over all replays of one analysis (~2.5 µs each): past it the remaining decompositions are left out
# and named, so a job of millions of ops costs a bounded time instead of (stages + DP ranks) full replays.
REPLAY_BUDGET = 8_000_000
IDEAL = ("every op at its op type's typical duration over all workers and steps: compute and other local ops "
         "the mean, communication transfers (waiting excluded) the median; no launch delays")


@dataclass
class SimJob:
    """Ops of all workers in one graph; times in ms."""

    source: str
    graph: Graph
    in_group: np.ndarray  # bool: the op's time is a transfer that ends with its group
    start: np.ndarray
    duration: np.ndarray
    optype: np.ndarray  # object array of op type names
    comm: np.ndarray  # bool: a communication op (its ideal is the median)
    stage: np.ndarray
    dp_rank: np.ndarray
    worker: np.ndarray
    step: np.ndarray  # index into steps
    steps: list[int]
    label: dict[str, str]  # op type -> the name it is reported under (p2p kinds merged per direction)
    link: np.ndarray | None = None  # object array: "a-b" for the p2p ops between ranks a < b, "" for others
    position: str = "DP rank"  # what dp_rank's keys are in the job's layout (WhatIf.position)


def _per_step(values: np.ndarray, step: np.ndarray, n: int, fn) -> np.ndarray:
    out = np.full(n, -np.inf if fn is np.maximum else np.inf)
    fn.at(out, step, values)
    return out


class _Runner:
    def __init__(self, job: SimJob):
        self.job = job
        j, g = job, job.graph
        n_steps = len(j.steps)
        end = j.start + j.duration
        self.step_start = _per_step(j.start, j.step, n_steps, np.minimum)
        self.release = self.step_start[j.step]
        self.measured = _per_step(end, j.step, n_steps, np.maximum) - self.step_start
        gid = np.asarray(g.group)
        last = np.full(max(len(g.groups), 1), -np.inf)
        np.maximum.at(last, gid[j.in_group], j.start[j.in_group])
        transfer = np.where(j.in_group, end - last[np.where(gid >= 0, gid, 0)], j.duration)
        transfer[j.in_group & (transfer <= -NEG_CLAMP_MS)] = 0.0
        self.time = transfer  # what the engine adds after an op starts (its duration, or its transfer)
        u = np.repeat(np.arange(g.n), np.diff(g.succ_ptr))
        v = np.asarray(g.succ, dtype=np.int64)
        ready = np.full(g.n, -np.inf)
        np.maximum.at(ready, v, end[u])
        delay = j.start - np.where(np.isfinite(ready), ready, self.release)
        delay[delay <= -NEG_CLAMP_MS] = 0.0
        self.delay = delay
        self.zero = np.zeros(g.n)
        self.used = 4  # replays so far, counted against REPLAY_BUDGET
        self.ideal_time = self._ideal()

    def _ideal(self) -> np.ndarray:
        j = self.job
        out = np.empty_like(self.time)
        for name in np.unique(j.optype):
            m = j.optype == name
            vals = self.time[m]
            out[m] = np.median(vals) if j.comm[m][0] else np.mean(vals)
        return out

    def steps(self, time: np.ndarray, delay: np.ndarray | None = None) -> np.ndarray:
        _, end = simulate(self.job.graph, time, self.zero if delay is None else delay, self.release)
        return _per_step(end, self.job.step, len(self.job.steps), np.maximum) - self.step_start

    def mixed(self, mask: np.ndarray, base: np.ndarray, other: np.ndarray) -> float:
        return float(self.steps(np.where(mask, other, base)).mean())

    def affords(self, replays: int) -> bool:
        """Whether `replays` more replays fit the budget (the four headline replays are always run)."""
        self.used += replays
        return self.used * self.job.graph.n <= REPLAY_BUDGET


def analyse(job: SimJob) -> WhatIf:
    r = _Runner(job)
    measured = r.measured
    simulated = r.steps(r.time, r.delay)
    no_delay = r.steps(r.time)
    ideal = r.steps(r.ideal_time)
    t_ori, t_ideal = float(no_delay.mean()), float(ideal.mean())
    w = WhatIf(source=job.source, workers=len(np.unique(job.worker)), steps=len(job.steps), ops=job.graph.n,
               measured_step_ms=float(measured.mean()), simulated_step_ms=float(simulated.mean()),
               no_delay_step_ms=t_ori, ideal_step_ms=t_ideal, ideal=IDEAL, position=job.position)
    w.sim_error = w.simulated_step_ms / w.measured_step_ms - 1
    w.slowdown = t_ori / t_ideal
    w.launch_slowdown = w.measured_step_ms / t_ori
    w.per_step = {str(s): float(a / b) for s, a, b in zip(job.steps, no_delay, ideal)}
    labels = np.array([job.label.get(o, o) for o in job.optype], dtype=object)
    for group, keys in (("optype", labels), ("stage", job.stage), ("dp_rank", job.dp_rank)):
        uniq = np.unique(keys)
        if not r.affords(len(uniq)):
            w.left_out.append(f"the decomposition by {group} ({len(uniq)} replays of {job.graph.n:,} ops)")
            continue
        for k in uniq:
            t = r.mixed(keys == k, r.ideal_time, r.time)
            w.contributions.append(Contribution(group, str(k), t / t_ideal))
    if job.link is not None:
        links = [k for k in np.unique(job.link) if k]
        if not r.affords(len(links)):
            w.left_out.append(f"the gains per point-to-point link ({len(links)} replays)")
        else:
            w.link_gains = {str(k): t_ori - r.mixed(job.link == k, r.time, r.ideal_time) for k in links}
    if t_ori - t_ideal <= 1e-9 * t_ori:
        return w
    if not ({"dp_rank", "stage"} <= {c.group for c in w.contributions}
            and r.affords(2 + GAIN_CANDIDATES * 4 + len(np.unique(job.stage)))):
        w.left_out.append("M_S, M_W and the per-worker and per-stage gains")
    else:
        last = job.stage == job.stage.max()
        w.ms = (t_ori - r.mixed(last, r.time, r.ideal_time)) / (t_ori - t_ideal)
        w.mw_ranks = _worst_workers(job, w)
        w.mw = (t_ori - r.mixed(np.isin(job.worker, w.mw_ranks), r.time, r.ideal_time)) / (t_ori - t_ideal)
        w.worker_gains = _worker_gains(job, w, r, t_ori)
        w.stage_gains = {str(s): t_ori - r.mixed(job.stage == s, r.time, r.ideal_time) for s in np.unique(job.stage)}
    return w


def _worker_gains(job: SimJob, w: WhatIf, r: _Runner, t_ori: float) -> list[WorkerGain]:
    """For the best-scored workers: the step with that worker's ops ideal, and its costliest op type (the
    one op type whose ideal alone gains most on it)."""
    out = []
    for k in _ranked_workers(job, w)[:GAIN_CANDIDATES]:
        mine = job.worker == k
        step = r.mixed(mine, r.time, r.ideal_time)
        if t_ori - step <= 0:  # already at or above its peers' speed: nothing to gain from it
            continue
        best, best_gain = "", 0.0
        for name in np.unique(job.optype[mine]):
            g = t_ori - r.mixed(mine & (job.optype == name), r.time, r.ideal_time)
            if g > best_gain:
                best, best_gain = str(job.label.get(name, name)), g
        out.append(WorkerGain(int(k), step, t_ori - step, best, best_gain))
    return sorted(out, key=lambda g: (-g.gain_ms, g.rank))


def _ranked_workers(job: SimJob, w: WhatIf) -> list[int]:
    """Workers by score, best first (ties to the lower rank): a worker's score is the smaller of its DP rank's
    and its stage's contribution (a worker is suspect only where both its replica and its stage are slow)."""
    dp = {c.key: c.slowdown for c in w.by("dp_rank")}
    st = {c.key: c.slowdown for c in w.by("stage")}
    pairs = {int(k): (str(d), str(s)) for k, d, s in zip(job.worker, job.dp_rank, job.stage)}
    score = {k: min(dp[d], st[s]) for k, (d, s) in pairs.items()}
    return sorted(score, key=lambda k: (-score[k], k))


def _worst_workers(job: SimJob, w: WhatIf) -> list[int]:
    """The top 3 % of workers by score (at least one): the study's M_W set."""
    ranked = _ranked_workers(job, w)
    return sorted(ranked[:max(1, math.ceil(len(ranked) * MW_SHARE))])
