"""The what-if graph of a Kineto pipeline job, from what resolution already decided (the Job,
metrics/job/state.py: the kept ranks, each one's clock shift, its staged pipeline actions): each rank's
pipeline actions (F/B/I/W per microbatch and step), its send/recv records with their peers, and its
collectives (as the skew matched them across ranks: by sequence number or completion time).

- a rank's actions run in their traced order (its compute stream);
- the n-th send from a rank to the next stage carries the activation of its n-th forward; the n-th recv
  from the previous stage feeds the receiver's n-th forward and is posted when the receiver's previous
  action ends; gradients likewise with backward (B or I) to the previous stage. A send and its recv are a
  synchronisation pair (they end together once both are posted; the rest is the transfer);
- a collective waits for the last action its rank finished before launching it, and ends with its group.

Not built (the section then says why, and gives no number): ranks missing, a rank that holds several
stages (interleaved schedules), ranks that traced different steps, send/recv whose counts do not pair with
the actions (unmatched p2p), a send to a rank that is not a neighbouring stage.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.metrics.job.collective_match import LONE
from llmdiag.diagnose.metrics.job.pipeline.p2p import on_clock, ordered_pairs
from llmdiag.diagnose.metrics.job.state import Job
from llmdiag.diagnose.model.roles import P2P_KINDS
from llmdiag.diagnose.model.whatif import WhatIf
from llmdiag.diagnose.simulate.engine import CycleError, GraphBuilder
from llmdiag.diagnose.simulate.whatif import SimJob, analyse

OPTYPE = {"F": "forward-compute", "B": "backward-compute", "I": "backward-input", "W": "backward-weight"}
LABEL = {"forward-send": "forward-pp-comm", "forward-recv": "forward-pp-comm", "backward-send": "backward-pp-comm",
         "backward-recv": "backward-pp-comm"}
LAUNCH_EPS_NS = 1_000  # a collective launched within 1 µs of an action's end waits for that action


class _Ops:
    def __init__(self):
        self.rows: list[tuple] = []  # (rank, step, optype, start ns, end ns, comm)
        self.link: dict[int, str] = {}  # op -> "a-b": the point-to-point link (ranks a < b) it moves data on

    def add(self, rank, step, optype, start, end, comm) -> int:
        self.rows.append((rank, step, optype, int(start), int(end), comm))
        return len(self.rows) - 1


def kineto_whatif(job: Job) -> WhatIf | None:
    """None where no rank has pipeline actions (nothing to simulate); a WhatIf naming what is missing where
    the graph cannot be built from the evidence. Ranks, actions and clocks are the Job's, as resolution decided
    them (a duplicate trace it left out is not a rank here)."""
    good = job.with_actions()
    if not good:
        return None
    acts = {o.rank: job.actions.get(o.rank, []) for o in good}
    n_ops = sum(len(acts[o.rank] or o.actions) for o in good)

    def missing(*why) -> WhatIf:
        return WhatIf("kineto-pipeline", len(good), 0, n_ops, missing=list(why))

    if job.missing:
        return missing(f"ranks without a trace: {', '.join(map(str, job.missing[:8]))}: their ops and the "
                       "transfers to them are unknown")
    stage, shift = {}, job.shift_ns
    for o in good:
        stages = {a.stage for a in acts[o.rank]}
        if not stages:
            return missing(f"rank {o.rank}: its actions are in no pipeline the assembly could read")
        if len(stages) != 1:
            return missing(f"rank {o.rank} holds {len(stages)} stages (an interleaved schedule): not simulated")
        stage[o.rank] = stages.pop()
    step_sets = {r: {a.step for a in xs} for r, xs in acts.items()}
    if len({frozenset(s) for s in step_sets.values()}) != 1:
        return missing("ranks traced different steps")
    steps = sorted(next(iter(step_sets.values())))
    ops, b_edges, groups = _Ops(), [], []
    assumed = []
    try:
        by_rank = {o.rank: _rank_ops(o.rank, acts[o.rank], shift[o.rank], ops, b_edges) for o in good}
        if any(o.p2p for o in good) or len(set(stage.values())) < 2:
            _p2p(good, stage, shift, by_rank, ops, b_edges, groups)
        else:  # no send/recv with peers (gloo's host ops carry none): the schedule's edges, transfers unknown
            _direct(stage, by_rank, b_edges)
            spans = any(c.kind in P2P_KINDS for o in good if o.metrics for c in o.metrics.comm_by_kind)
            said = ("the traces' send/recv name no peer (gloo's spans carry none), so the graph holds no send/recv "
                    "with peers" if spans else "the traces hold no send/recv with peers")
            assumed.append(said + ": each forward waits for the previous stage's, each backward for the next "
                           "stage's, and transfers are part of the launch delays (free communication in the "
                           "no-delay and ideal replays)")
        _collectives(good, shift, job.collectives, by_rank, ops, b_edges, groups)
    except _Unbuildable as e:
        return missing(str(e))
    try:
        w = analyse(_job(ops, b_edges, groups, stage, steps, {o.rank: o.metrics.coords for o in good if o.metrics}))
    except CycleError as e:
        return missing(f"the dependencies read from the traces contradict each other: {e}")
    w.assumed = assumed
    return w


def _direct(stage, by_rank, edges: list) -> None:
    """F(s, mb) after F(s−1, mb); B/I(s, mb) after B/I(s+1, mb), same step; one stage per rank."""
    at: dict[tuple, int] = {}
    for r, d in by_rank.items():
        mbs = d["mb"]
        for (i, kind, step), mb in zip(d["acts"], mbs):
            at[(stage[r], "F" if kind == "F" else "B", mb, step)] = i
    for (s, kind, mb, step), i in at.items():
        peer = (s - 1, "F", mb, step) if kind == "F" else (s + 1, "B", mb, step)
        if peer in at:
            edges.append((i, at[peer]))
        elif (kind == "F" and s > 0) or (kind == "B" and s < max(stage.values())):
            raise _Unbuildable(f"stage {s}'s {kind} of microbatch {mb} (step {step}) has no counterpart on the "
                               f"{'previous' if kind == 'F' else 'next'} stage")


class _Unbuildable(ValueError):
    pass


def _rank_ops(rank: int, actions, sh: int, ops: _Ops, edges: list) -> dict:
    """Actions (rank-relative, `sh` ns to the common clock) as ops, chained in start order per step; returns the
    rank's action ids and their kinds."""
    acts = sorted(actions, key=lambda a: (a.start, a.end))
    ids, prev = [], {}
    for a in acts:
        i = ops.add(rank, a.step, OPTYPE.get(a.kind, a.kind), a.start + sh, a.end + sh, False)
        if a.step in prev:
            edges.append((i, prev[a.step]))
        prev[a.step] = i
        ids.append((i, a.kind, a.step))
    return {"acts": ids, "mb": [a.microbatch for a in acts]}


def _p2p(good, stage, shift, by_rank, ops: _Ops, edges: list, groups: list) -> None:
    rank_of_stage = defaultdict(list)
    for r, s in stage.items():
        rank_of_stage[s].append(r)
    for o in good:
        for pg, kind, peer, s, e in o.p2p:
            if peer not in stage:
                raise _Unbuildable(f"rank {o.rank} sends to or receives from rank {peer}, which has no trace")
            d = stage[peer] - stage[o.rank]
            if abs(d) != 1:
                raise _Unbuildable(f"rank {o.rank} (stage {stage[o.rank]}) exchanges with rank {peer} "
                                   f"(stage {stage[peer]}): not a neighbouring stage")
    pairs = ordered_pairs(on_clock({o.rank: o.p2p for o in good}, shift))
    last = max(stage.values())
    for r, s in sorted(stage.items()):
        if s < last and not any(k[1] == r and stage[k[2]] == s + 1 for k in pairs):
            raise _Unbuildable(f"no send/recv with a peer from rank {r} (stage {s}) to the next stage: the "
                               "transfers between stages are unknown")
    for (pg, src, dst), (a, b) in pairs.items():
        fwd = stage[dst] == stage[src] + 1
        produce = [x for x in by_rank[src]["acts"] if (x[1] == "F" if fwd else x[1] in ("B", "I"))]
        consume = [x for x in by_rank[dst]["acts"] if (x[1] == "F" if fwd else x[1] in ("B", "I"))]
        if not (len(a) == len(b) == len(produce) == len(consume)):
            raise _Unbuildable(f"unmatched p2p from rank {src} to rank {dst}: {len(a)} sends, {len(b)} recvs for "
                               f"{len(produce)} {'forwards' if fwd else 'backwards'} sent and {len(consume)} received")
        before = {x[0]: p for x, p in _prev_in_stream(by_rank[dst]["acts"])}
        kind = "forward" if fwd else "backward"
        for (ss, se), (rs, re), (pi, _, pstep), (ci, _, cstep) in zip(a, b, produce, consume):
            si = ops.add(src, pstep, f"{kind}-send", ss, se, True)
            ri = ops.add(dst, cstep, f"{kind}-recv", rs, re, True)
            ops.link[si] = ops.link[ri] = f"{min(src, dst)}-{max(src, dst)}"
            edges.append((si, pi))
            edges.append((ci, ri))
            if before.get(ci) is not None:
                edges.append((ri, before[ci]))
            groups.append([si, ri])


def _prev_in_stream(acts):
    prev = {}
    for x in acts:
        yield x, prev.get(x[2])
        prev[x[2]] = x[0]


def _collectives(good, shift, matched, by_rank, ops: _Ops, edges: list, groups: list) -> None:
    """Each collective after the action before its launch, and synchronised with the rows of the other ranks
    the skew matched it to (`matched`: Job.collectives); one no other rank's row matched is a group of one."""
    members = defaultdict(list)
    for o in good:
        c = o.collectives
        idx = matched.get(o.rank)
        acts = by_rank[o.rank]["acts"]
        ends = np.array([ops.rows[i][4] for i, _, _ in acts], dtype=np.int64)
        order = np.argsort(ends, kind="stable")
        sorted_ends = ends[order]
        last_of_pg = {}
        for k in range(len(c)):
            s, e = int(c.start[k]) + shift[o.rank], int(c.end[k]) + shift[o.rank]
            pg, kind = c.keys[int(c.key[k])]
            j = int(np.searchsorted(sorted_ends, s + LAUNCH_EPS_NS, side="right")) - 1
            after = acts[int(order[j])] if j >= 0 else None
            step = after[2] if after else acts[0][2]
            i = ops.add(o.rank, step, kind or "collective", s, e, True)
            if after:
                edges.append((i, after[0]))
            if (pg, kind) in last_of_pg:
                edges.append((i, last_of_pg[(pg, kind)]))
            last_of_pg[(pg, kind)] = i
            lone = idx is None or idx[k] <= LONE  # a group of its own
            members[(pg, kind, o.rank, k) if lone else (pg, kind, int(idx[k]))].append(i)
    for m in members.values():
        if len({ops.rows[i][1] for i in m}) > 1:
            raise _Unbuildable("a collective matched across ranks falls in different steps on different ranks")
        groups.append(m)


PLACE_DIMS = ("dp", "fsdp", "cp", "tp")  # what tells a stage's ranks apart, besides pp


def positions(stage: dict[int, int], coords: dict[int, dict | None]) -> tuple[str, dict[int, str]]:
    """(what the keys are, rank -> key) of each rank's place among its stage's ranks, by its role in the
    resolved layout: the one coordinate that differs between a stage's ranks ("TP rank", the tp index: a
    tp4pp2 run's stage holds 4 TP peers, not 4 DP ranks), several ("ranks at", "dp1 tp0"), or, without
    coordinates (foreign traces), its index among the stage's ranks ("rank in stage")."""
    same_stage = defaultdict(list)
    for r, s in sorted(stage.items()):
        same_stage[s].append(r)
    co = {r: coords.get(r) or {} for r in stage}
    if all(isinstance(co[r].get(d), int) for r in stage for d in PLACE_DIMS):
        vary = [d for d in PLACE_DIMS if any(len({co[r][d] for r in rs}) > 1 for rs in same_stage.values())]
        if len(vary) == 1:
            return f"{vary[0].upper()} rank", {r: str(co[r][vary[0]]) for r in stage}
        if vary:
            return "ranks at", {r: " ".join(f"{d}{co[r][d]}" for d in vary) for r in stage}
        return "DP rank", {r: "0" for r in stage}
    return "rank in stage", {r: str(k) for rs in same_stage.values() for k, r in enumerate(rs)}


def _job(ops: _Ops, edges, groups, stage, steps, coords: dict[int, dict | None] | None = None) -> SimJob:
    rows = ops.rows
    n = len(rows)
    b = GraphBuilder(n)
    for after, before in edges:
        if rows[after][1] == rows[before][1]:  # steps are replayed apart
            b.dep(after, before)
    for g in groups:
        b.sync(g)
    g = b.build()
    rank = np.array([r[0] for r in rows], dtype=np.int64)
    position, dp_of = positions(stage, coords or {})
    start = np.array([r[3] for r in rows], dtype=np.float64) / 1e6
    end = np.array([r[4] for r in rows], dtype=np.float64) / 1e6
    optype = np.array([r[2] for r in rows], dtype=object)
    link = np.array([ops.link.get(i, "") for i in range(n)], dtype=object) if ops.link else None
    return SimJob("kineto-pipeline", g, np.asarray(g.group) >= 0, start, end - start, optype,
                  np.array([r[5] for r in rows], dtype=bool), np.array([stage[x] for x in rank]),
                  np.array([dp_of[x] for x in rank], dtype=object), rank, np.searchsorted(steps, [r[1] for r in rows]),
                  steps, LABEL, link, position)
