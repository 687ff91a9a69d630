"""The dependency graph of a Megatron-LM job from the straggler study's op table (diagnose.io.megatron_ops),
following the paper's dependency model (OSDI'25, "Understanding Stragglers in Large Model Training Using
What-if Analysis", §4; its artifact's analyzer/dependency_model.py is the reference we checked against).

Every DP rank and step runs the same program, so the model is built once per stage from one worker's first
step (a template of op slots: op type, seq id, stage) and laid over every (DP rank, step) instance:
- forward/backward compute of a stage run in their traced order (one compute stream);
- each p2p op type is a stream of its own, in traced order; a send waits for the compute it sends, a recv
  runs before the compute that consumes it and after the previous compute of its kind; the k-th send of a
  stage is matched with the k-th recv of the peer stage, and the pair ends together;
- the first backward send/recv waits for the compute two before the first backward compute;
- params all-gather precedes the first forward compute of its model chunk; after the last compute the
  step ends with gc → layernorm all-reduce → embedding all-reduce → grads reduce-scatter(s) (or, when
  gradients are reduced during backward, after the last reduce-scatter) → clip → optimizer;
- DP collectives synchronise the same op over all DP ranks, the embedding all-reduce the first and last
  stage, the grad-norm clip every worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmdiag.diagnose.io.megatron_ops import OpTable
from llmdiag.diagnose.simulate.engine import Graph, GraphBuilder

FWD, BWD = "forward-compute", "backward-compute"
P2P = {"forward-send": ("forward", "send", "forward-recv", 1), "forward-recv": ("forward", "recv", "forward-send", -1),
       "backward-send": ("backward", "send", "backward-recv", -1), "backward-recv": ("backward", "recv", "backward-send", 1)}
AG, RS, SEP_AR = "params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce"
LN_AR, EMB_AR, CLIP, OPT, GC = "layernorm-grads-all-reduce", "embedding-grads-all-reduce", "optimizer-clip-main-grad", "optimizer", "gc"
COMM_TYPES = set(P2P) | {AG, RS, SEP_AR, LN_AR, EMB_AR, CLIP}  # communication: their ideal is the median
KNOWN = COMM_TYPES | {FWD, BWD, OPT, GC}
EPS = 5e-5  # s: clock tolerance when telling p2p ops outside the compute span (the artifact's value)

Slot = tuple[int, str, int]  # (stage, op type, seq id)


@dataclass
class JobGraph:
    graph: Graph | None
    missing: list[str] = field(default_factory=list)
    in_group: np.ndarray | None = None  # op takes part in a synchronisation group (its time is a transfer)
    inst: np.ndarray | None = None  # (dp rank, step) instance of each op


def build(t: OpTable) -> JobGraph:
    dp, pp = int(t.meta["dp_size"]), int(t.meta["pp_size"])
    names = np.asarray(t.optypes, dtype=object)[t.optype]
    unknown = sorted(set(t.optypes) - KNOWN - {"first-op"})
    if unknown:
        return JobGraph(None, [f"op types the dependency model does not know: {', '.join(unknown[:5])}"])
    steps = np.unique(t.step)
    step_ix = np.searchsorted(steps, t.step)
    inst = t.dp_rank * len(steps) + step_ix
    first = (t.dp_rank == 0) & (t.step == steps[0])
    slots: dict[Slot, int] = {}
    rows_of_stage = {s: np.flatnonzero(first & (t.stage == s)) for s in range(pp)}
    for s, rows in rows_of_stage.items():
        for r in rows:
            slots.setdefault((s, names[r], int(t.seq_id[r])), len(slots))
    missing = [f"stage {s} has no ops in the first step of DP rank 0" for s in range(pp) if not len(rows_of_stage[s])]
    n_inst = dp * len(steps)
    row_of = np.full((n_inst, len(slots)), -1, dtype=np.int64)
    slot_of_row = np.array([slots.get((int(s), n, int(q)), -1) for s, n, q in zip(t.stage, names, t.seq_id)],
                           dtype=np.int64)
    if (slot_of_row < 0).any():
        r = int(np.flatnonzero(slot_of_row < 0)[0])
        missing.append(f"{int((slot_of_row < 0).sum())} ops have no counterpart in the first step of DP rank 0 "
                       f"(first: {names[r]} #{t.seq_id[r]} of stage {t.stage[r]}, step {t.step[r]}, DP rank {t.dp_rank[r]})")
    ok = slot_of_row >= 0
    if (np.bincount(inst[ok] * len(slots) + slot_of_row[ok], minlength=n_inst * len(slots)) > 1).any():
        missing.append("an op (stage, op type, seq id) appears twice in one step of one worker")
    row_of[inst[ok], slot_of_row[ok]] = np.flatnonzero(ok)
    holes = np.argwhere(row_of < 0)
    if len(holes):
        i, sl = holes[0]
        s, n, q = next(k for k, v in slots.items() if v == sl)
        missing.append(f"{len(holes)} ops of the template are absent in other steps or DP ranks (first: {n} #{q} "
                       f"of stage {s}, step {steps[i % len(steps)]}, DP rank {i // len(steps)})")
    if missing:
        return JobGraph(None, missing)

    tmpl = _Template(t, names, slots, pp, dp, {s: rows_of_stage[s] for s in range(pp)})
    try:
        tmpl.make()
    except _ModelError as e:
        return JobGraph(None, [str(e)])
    b = GraphBuilder(t.n)
    for after, before in tmpl.edges:
        for a, c in zip(row_of[:, after].tolist(), row_of[:, before].tolist()):
            b.dep(a, c)
    for members in tmpl.groups:  # within one worker pair / stage set, per instance
        for i in range(n_inst):
            b.sync([int(row_of[i, m]) for m in members])
    for sl in tmpl.dp_sync:  # the same op over all DP ranks of a step (several slots: the clip over stages)
        cols = row_of[:, sl].reshape(dp, len(steps), len(sl))
        for k in range(len(steps)):
            b.sync(cols[:, k, :].ravel().tolist())
    g = b.build()
    return JobGraph(g, [], np.asarray(g.group) >= 0, inst)


class _ModelError(ValueError):
    pass


class _Template:
    """Edges (after slot, before slot) and groups of slots, from DP rank 0's first step."""

    def __init__(self, t: OpTable, names, slots: dict[Slot, int], pp: int, dp: int, rows: dict[int, np.ndarray]):
        self.t, self.names, self.slots, self.pp, self.dp, self.rows = t, names, slots, pp, dp, rows
        self.edges: list[tuple[int, int]] = []
        self.groups: list[list[int]] = []
        self.dp_sync: list[list[int]] = []
        self.vpp = int(t.meta.get("vpp_size") or 1)

    def _sorted(self, s: int, types) -> list[int]:
        t, rows = self.t, self.rows[s]
        rows = [r for r in rows if self.names[r] in types]
        return sorted(rows, key=lambda r: (t.start[r], t.seq_id[r], self.names[r]))

    def slot(self, r: int) -> int:
        return self.slots[(int(self.t.stage[r]), self.names[r], int(self.t.seq_id[r]))]

    def named(self, s: int, optype: str, seq: int) -> int | None:
        return self.slots.get((s, optype, seq))

    def chain(self, slots: list[int | None], after: list[int] = ()) -> None:
        last = list(after)
        for x in slots:
            if x is None:
                continue
            self.edges += [(x, u) for u in last]
            last = [x]

    def make(self) -> None:
        valid_p2p: dict[tuple[int, str], list[int]] = {}
        has_sep = SEP_AR in self.names
        for s in range(self.pp):
            comp = self._sorted(s, (FWD, BWD))
            if not comp:
                raise _ModelError(f"stage {s} has no forward/backward compute")
            self.chain([self.slot(r) for r in comp])
            self._p2p(s, valid_p2p)
            for optype in P2P:
                self.chain([self.slot(r) for r in self._sorted(s, (optype,))])
            self._first_backward(s, comp)
            self._dp_and_tail(s, comp, has_sep)
        for (s, optype), ops in valid_p2p.items():
            peer, delta = P2P[optype][2], P2P[optype][3]
            if optype.endswith("send"):
                theirs = valid_p2p.get(((s + delta) % self.pp, peer), [])
                if len(theirs) != len(ops):
                    raise _ModelError(f"stage {s} has {len(ops)} {optype} but stage {(s + delta) % self.pp} has "
                                      f"{len(theirs)} {peer}: unmatched p2p")
                self.groups += [[a, b] for a, b in zip(ops, theirs)]
        emb = [x for x in (self.named(0, EMB_AR, 0), self.named(self.pp - 1, EMB_AR, 0)) if x is not None]
        if emb:
            self.groups.append(sorted(set(emb)))
        clip = [self.named(s, CLIP, 0) for s in range(self.pp)]
        if any(c is not None for c in clip):
            self.dp_sync.append([c for c in clip if c is not None])

    def _p2p(self, s: int, valid: dict) -> None:
        """Match each p2p op with its compute; ops outside the compute span are no-ops (a stream of one)."""
        t = self.t
        for kind in ("forward", "backward"):
            comp = self._sorted(s, (f"{kind}-compute",))
            last_start = max(t.start[r] for r in comp) if comp else 0.0
            first_end = min(t.start[r] + t.duration[r] for r in comp) if comp else 0.0
            for sr in ("send", "recv"):
                optype = f"{kind}-{sr}"
                ops = self._sorted(s, (optype,))
                inside = {r for r in ops if (t.start[r] <= last_start + EPS if sr == "recv"
                                             else t.start[r] + t.duration[r] >= first_end - EPS)}
                if len(inside) not in (0, len(comp), len(comp) - 1):
                    raise _ModelError(f"stage {s}: {len(inside)} {optype} ops for {len(comp)} {kind} computes")
                cid = 1 if sr == "recv" and len(inside) == len(comp) - 1 else 0
                for r in ops:
                    me = self.slot(r)
                    if r not in inside:
                        self.groups.append([me])
                        continue
                    c = self.named(s, f"{kind}-compute", cid)
                    if c is None:
                        raise _ModelError(f"stage {s}: {optype} #{t.seq_id[r]} has no {kind}-compute #{cid}")
                    gmc = int(t.gmc[self._row(s, f'{kind}-compute', cid)])
                    peer_gmc = gmc + P2P[optype][3]
                    if sr == "send":
                        self.edges.append((me, c))
                    else:
                        self.edges.append((c, me))
                        prev = self.named(s, f"{kind}-compute", cid - 1)
                        if prev is not None:
                            self.edges.append((me, prev))
                    if 0 <= peer_gmc < self.vpp * self.pp:
                        valid.setdefault((s, optype), []).append(me)
                    else:
                        self.groups.append([me])
                    cid += 1

    def _row(self, s: int, optype: str, seq: int) -> int:
        return next(r for r in self.rows[s] if self.names[r] == optype and self.t.seq_id[r] == seq)

    def _first_backward(self, s: int, comp: list[int]) -> None:
        i = next((k for k, r in enumerate(comp) if self.names[r] == BWD), None)
        if i is None or i < 2:
            return
        before = self.slot(comp[i - 2])
        for optype in ("backward-recv", "backward-send"):
            x = self.named(s, optype, 0)
            if x is not None:
                self.edges.append((x, before))

    def _dp_and_tail(self, s: int, comp: list[int], has_sep: bool) -> None:
        t = self.t
        dp_ops = self._sorted(s, (AG, RS))
        self.chain([self.slot(r) for r in dp_ops])
        for r in dp_ops:
            self.dp_sync.append([self.slot(r)])
        for r in self._sorted(s, (SEP_AR,)):
            self.dp_sync.append([self.slot(r)])
        ags = sorted((r for r in dp_ops if self.names[r] == AG), key=lambda r: -t.seq_id[r])
        seen = set()
        for r in ags:  # the last all-gather of each model chunk gates the chunk's first forward
            if t.mc[r] in seen:
                continue
            seen.add(t.mc[r])
            fwd = [c for c in comp if self.names[c] == FWD and t.mc[c] == t.mc[r]]
            if fwd:
                self.edges.append((self.slot(min(fwd, key=lambda c: t.start[c])), self.slot(r)))
        rss = sorted((r for r in dp_ops if self.names[r] == RS), key=lambda r: t.seq_id[r])
        if has_sep:
            seen = set()
            for r in rss:  # gradients reduced during backward: each chunk's first reduce after its last backward
                if t.mc[r] in seen:
                    continue
                seen.add(t.mc[r])
                bwd = [c for c in comp if self.names[c] == BWD and t.mc[c] == t.mc[r]]
                if bwd:
                    self.edges.append((self.slot(r), self.slot(max(bwd, key=lambda c: t.start[c] + t.duration[c]))))
        last = max(comp, key=lambda c: t.start[c] + t.duration[c])
        gc = self.named(s, GC, 0)
        self.chain([gc], [self.slot(last)])
        head = [gc] if gc is not None else [self.slot(last)]
        emb = [self.named(s, EMB_AR, 0)] if s in (0, self.pp - 1) else []
        tail = [self.named(s, CLIP, 0), self.named(s, OPT, 0)]
        if has_sep:
            self.chain([self.named(s, LN_AR, 0), *emb, self.named(s, SEP_AR, 0), *tail],
                       head + ([self.slot(rss[-1])] if rss else []))
        else:
            self.chain([self.named(s, LN_AR, 0), *emb, *[self.slot(r) for r in rss], *tail], head)
