"""Pipeline actions of a trace with no `PP:` labels (Megatron-style), from its send/recv and compute kernels.

Evidence, in order: the peers of the rank's send/recv kernels (Kineto's `Src Rank` / `Dst Rank`) give its
neighbours: a stage's first transfer of a step is the receive of microbatch 0's activation from the previous
stage, except stage 0, whose first is a send. Compute kernels between transfers form actions: a new action
starts where a receive completed or a send was posted between two kernels, or where the launch context
changes: the host thread (torch runs backward on the autograd engine's device thread) or, on one thread, from
forward ops to autograd nodes (`autograd::engine::evaluate_function: …`). Batched transfers (one coalesced
kernel for several ops) count as their kernel's span (batch.py); peers no op names come from the group's rank
list (peers.py). An action fed by a receive from
the previous stage or followed by a send to the next is a forward; from/to the next stage a backward; an
action with no transfer on either side takes the kind its launch context had elsewhere. The n-th forward
(backward) of a step is microbatch n, as in GPipe and 1F1B. Stage numbers come later, from the chain of
neighbours across ranks (`chains`, job/pipeline/chains.py). Where any of this does not hold, no actions and a reason: unknown, not
a guess.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.io.trace import COMPUTE, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank.pipeline.p2p import Record, p2p_ops, p2p_records
from llmdiag.diagnose.metrics.rank.pipeline.actions import Action
from llmdiag.diagnose.metrics.rank.steps import Window


BACKWARD_OPS = ("autograd::engine::evaluate_function", "CompiledFunctionBackward", "torch::autograd::")


@dataclass
class Links:
    """One rank's pipeline neighbours (global ranks), or why none could be told."""

    prev: int | None = None
    next: int | None = None
    reason: str = ""  # empty when actions were inferred
    blocks: list = field(default_factory=list)  # compute blocks labelled by launch context alone (virtual.py)
    # Where some send/recv name no peer: every op, and the compute blocks per step, for timematch.py to read the rank
    # again once the other ranks' traces have told the peers.
    ops: list = field(default_factory=list)  # batch.P2POp, peers where told
    raw: list = field(default_factory=list)  # (step, window start, window end, [(start, end, launch context)])
    note: str = ""  # how its peers were told, where the ops name none (timematch.py), for the explanation


@dataclass
class _P2P:
    """A send or recv reduced to what telling stages needs: its kind, the peer, its span."""

    kind: str  # send or recv
    peer: int
    start: int
    end: int


def infer_actions(t: RankTrace, wins: list[Window], records: list[Record] | None = None, why: str = ""
                  ) -> tuple[list[Action], Links | None]:
    """([], None) when the rank has no send/recv; ([], Links(reason=...)) when it cannot be told as one stage.
    Where autograd nodes tell forward from backward, Links.blocks also holds the rank's compute blocks labelled
    by that alone (no stage or microbatch): virtual.py places them across ranks when the ranks do not chain one
    stage each. `records`, `why`: this rank's p2p_records, when the caller has them already."""
    recs, why = p2p_records(t, wins) if records is None else (records, why)
    if why:  # some ops name no peer: keep what reading the rank again needs, once timematch.py has the peers
        ops, _ = p2p_ops(t, wins)
        raw = _raw_blocks(t, wins, [_P2P(o.kind, -1, o.start, o.end) for o in ops])
        return [], Links(reason=why, ops=ops, raw=raw)
    p2p = [_P2P(kind, peer, s, e) for _, kind, peer, s, e in recs]
    if not p2p:
        return [], None
    raw = _raw_blocks(t, wins, p2p)
    acts, links = read_rank(raw, p2p)
    ops, _ = p2p_ops(t, wins)
    if any(o.listed for o in ops):  # peers from the group's list: timematch.py may tell them from the traces
        links.ops, links.raw = ops, raw
    return acts, links


def read_rank(raw: list, p2p: list[_P2P]) -> tuple[list[Action], Links]:
    """The one-stage reading of a rank from its compute blocks per step and its send/recv with peers, and its
    blocks labelled by launch context for virtual.py."""
    acts, links = _one_stage_per_rank(raw, p2p)
    links.blocks = _context_blocks(raw)  # for virtual.py, should the ranks not chain one stage each
    return acts, links


def _raw_blocks(t: RankTrace, wins: list[Window], p2p: list[_P2P]) -> list:
    """(step, window start, window end, blocks) per window with compute: blocks as _blocks makes them."""
    thread_of = _launch_threads(t)
    dev = (t.kind == COMPUTE) & (t.stream >= 0)
    out = []
    for w in wins:
        idx = np.flatnonzero(dev & (t.ts >= w.start) & (t.ts <= w.end))
        idx = idx[np.lexsort((t.dur[idx], t.ts[idx]))]
        if len(idx):
            mine = [p for p in p2p if w.start <= p.start <= w.end]
            out.append((w.step, w.start, w.end, _blocks(t, idx, mine, thread_of)))
    return out


def _context_blocks(raw: list) -> list[Action]:
    """Compute blocks labelled by launch context alone (F outside autograd nodes, B inside); [] where the trace
    has no autograd node to tell them by."""
    if not any(ctx % 2 for _, _, _, bl in raw for _, _, ctx in bl):
        return []
    return [Action(step, -1, "B" if ctx % 2 else "F", -1, s, e) for step, _, _, bl in raw for s, e, ctx in bl]


def _one_stage_per_rank(raw: list, p2p: list[_P2P]) -> tuple[list[Action], Links]:
    peers = {p.peer for p in p2p}
    if len(peers) > 2:
        return [], Links(reason=f"send/recv with {len(peers)} peers (a pipeline stage has at most 2)")
    first_send = next((p for p in p2p if p.kind == "send"), None)
    first_recv = next((p for p in p2p if p.kind == "recv"), None)
    if first_recv is not None and (first_send is None or first_recv.start < first_send.start):
        prev = first_recv.peer
        rest = peers - {prev}
        nxt = rest.pop() if rest else None
    elif first_send is not None:
        prev, nxt = None, first_send.peer
        if len(peers) > 1:
            return [], Links(reason="the rank whose first transfer is a send (stage 0) talks to two peers: not one "
                                    "stage per rank")
    else:
        return [], Links(reason="no send/recv with a peer")
    links = Links(prev, nxt)
    out: list[Action] = []
    for step, lo, hi, blocks in raw:
        mine = [p for p in p2p if lo <= p.start <= hi]
        kinds, why = _label(blocks, mine, links)
        if kinds is None:
            return [], Links(prev, nxt, f"step {step}: {why}")
        n = Counter()
        step_acts = []
        for (s, e, _), k in zip(blocks, kinds):
            if k:
                step_acts.append(Action(step, -1, k, n[k], s, e))
                n[k] += 1
        if n["F"] != n["B"] or not n["F"]:
            return [], Links(prev, nxt, f"step {step}: {n['F']} forward and {n['B']} backward actions")
        out += step_acts
    if not out:
        return [], Links(prev, nxt, NO_COMPUTE)
    return out, links


def _launch_threads(t: RankTrace) -> dict[int, int]:
    """correlation id -> launch context: the host thread, doubled, plus 1 when the launch sits under an autograd
    node (`autograd::engine::evaluate_function: …Backward0`). Backward is told from forward by that op even
    where one thread launches both (CPU-side autograd, compiled autograd, wrappers)."""
    host = np.flatnonzero((t.kind == RUNTIME) & (t.corr >= 0))
    ctx = 2 * t.thread[host].astype(np.int64)
    bwd = np.flatnonzero(t.name_mask(lambda n: n.startswith(BACKWARD_OPS), (t.kind == CPU_OP) & (t.stream < 0)))
    if len(bwd):
        for th in np.unique(t.thread[bwd]).tolist():
            b = bwd[t.thread[bwd] == th]
            b = b[np.argsort(t.ts[b], kind="stable")]
            ends = np.maximum.accumulate(t.ts[b] + t.dur[b])  # nested nodes: the outermost end so far
            mine = t.thread[host] == th
            j = np.searchsorted(t.ts[b], t.ts[host[mine]], "right") - 1
            inside = (j >= 0) & (t.ts[host[mine]] <= ends[np.maximum(j, 0)])
            ctx[np.flatnonzero(mine)[inside]] += 1
    return dict(zip(t.corr[host].tolist(), ctx.tolist()))


def _blocks(t: RankTrace, idx: np.ndarray, p2p: list[_P2P], thread_of: dict[int, int]) -> list[tuple[int, int, int]]:
    """(start, end, launching thread) of each run of kernels (in start order) that no completed receive or
    posted send divides and one host thread launched."""
    marks = np.array(sorted([p.end for p in p2p if p.kind == "recv"] + [p.start for p in p2p if p.kind == "send"]),
                     np.int64)
    s = t.ts[idx].astype(np.int64)
    e = (t.ts[idx] + t.dur[idx]).astype(np.int64)
    th = np.array([thread_of.get(c, -1) for c in t.corr[idx].tolist()], np.int64)
    reach = np.maximum.accumulate(e)  # the end of everything before: a gap runs from it to the next start
    new = np.ones(len(idx), bool)
    if len(idx) > 1:
        lo, hi = reach[:-1], s[1:]
        divided = np.searchsorted(marks, lo, "left") < np.searchsorted(marks, hi, "right")
        new[1:] = (divided & (hi >= lo)) | (th[1:] != th[:-1])
    first = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, first)
    return list(zip(s[first].tolist(), ends.tolist(), th[first].tolist()))


NO_COMPUTE = "no compute kernels inside the steps"
NEITHER = "a group of kernels is neither clearly forward nor backward"


def _label(blocks, p2p: list[_P2P], links: Links) -> tuple[list[str | None] | None, str]:
    """F or B per block from the transfers around it, then from its launch context; (None, why) if unresolved
    or if the directions contradict the autograd nodes the kernels were launched under.
    Blocks before the first and after the last with transfer evidence (data loading, the optimizer step) are
    outside the schedule: labelled None."""
    recvs = sorted((p.end, "F" if p.peer == links.prev else "B") for p in p2p if p.kind == "recv")
    sends = sorted((p.start, "F" if p.peer == links.next else "B") for p in p2p if p.kind == "send")
    r_at, s_at = [x[0] for x in recvs], [x[0] for x in sends]
    kinds: list[str | None] = []
    voted: list[set] = []
    for j, (s, e, _) in enumerate(blocks):
        before = blocks[j - 1][1] if j else -(1 << 62)
        after = blocks[j + 1][0] if j + 1 < len(blocks) else 1 << 62
        votes = {k for _, k in recvs[bisect_left(r_at, before):bisect_right(r_at, s)]}  # its input arrived
        votes |= {k for _, k in sends[bisect_left(s_at, e):bisect_right(s_at, after)]}  # its output left
        voted.append(votes)
        kinds.append(next(iter(votes)) if len(votes) == 1 else None)
    if any(ctx % 2 for _, _, ctx in blocks):  # autograd nodes mark backward: the directions must agree with them
        wrong = [j for j, ((_, _, ctx), v) in enumerate(zip(blocks, voted)) if ("F" if ctx % 2 else "B") in v]
        if wrong:
            return None, (f"{len(wrong)} group(s) of kernels move data against their direction (a forward fed "
                          "from the next stage or a backward from the previous): not one stage per rank")
    by_thread: dict[int, Counter] = {}
    for (_, _, th), k in zip(blocks, kinds):
        if k:
            by_thread.setdefault(th, Counter())[k] += 1
    known = [j for j, k in enumerate(kinds) if k]
    if not known:
        return None, NEITHER
    out: list[str | None] = []
    for j, ((_, _, th), k) in enumerate(zip(blocks, kinds)):
        if k is None and not known[0] < j < known[-1]:
            out.append(None)
            continue
        if k is None:
            c = by_thread.get(th)
            if not c or len(c) != 1:
                return None, NEITHER
            k = next(iter(c))
        out.append(k)
    return out, ""


