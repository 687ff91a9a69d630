"""Peers of send/recv that name none, told by the other ranks' traces (every rank of the group traced).

A send on rank a and the receive that takes it on rank b are both in flight while the data moves: on the common
clock their device spans overlap, and they move the same tensor (`In/Out msg nelems`, `dtype`). So the true
counterpart of an op is always among the ops of the opposite kind on the group's other ranks that overlap it,
move the same size and name no other peer. Where those lie on one rank only, that rank is the peer: no guess.
Each peer told narrows the others (an op whose peer is known takes nothing from another rank), until nothing
changes. Then every pair is checked as NCCL pairs it: the n-th send a→b with the n-th receive on b from a, as
many of each, each two overlapping. Any op left with two candidate ranks, or a pair that fails the check, leaves
the rank unknown with that reason.

Single ops on one stream of a rank share their peer (ProcessGroupNCCL gives each peer pair its own communicator
and stream): their candidate ranks are intersected. Batched ops (one coalesced kernel, on the group's stream)
each carry their kernel's span: the test is the same, only coarser.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import replace
from itertools import accumulate

from llmdiag.diagnose.metrics.job.pipeline.p2p import ordered_pairs
from llmdiag.diagnose.metrics.rank.pipeline.batch import P2POp
from llmdiag.diagnose.metrics.rank.pipeline.infer import _P2P, read_rank
from llmdiag.diagnose.metrics.rank.pipeline.peers import NO_PEERS

def recover_peers(good: list, shift: dict[int, int]) -> None:
    """Fill in the peers, actions and links of ranks (RankOutput) whose send/recv named no peer, where the other
    ranks' traces tell them; otherwise their reason says why not. `shift`: rank -> ns onto the common clock.
    Peers an end rank took from its group's list (a linear pipeline assumed) are first left out, so that the
    traces alone decide; only if they do not is that assumption used."""
    if not any(o.links is not None and o.links.ops and o.links.reason.startswith(NO_PEERS) for o in good):
        return
    ops: dict[int, list[P2POp]] = {}
    for o in good:
        sh = shift.get(o.rank, 0)
        if o.links is not None and o.links.ops:
            ops[o.rank] = [replace(x, start=x.start + sh, end=x.end + sh) for x in o.links.ops]
        elif o.p2p:  # peers all told by the ops: no sizes kept, which matches any size
            ops[o.rank] = [P2POp(k, peer, pg, None, s + sh, e + sh, -1, False) for pg, k, peer, s, e in o.p2p]
    bare = {r: [replace(x, peer=None, listed=False) if x.listed else x for x in v] for r, v in ops.items()}
    peers, why = match(bare)
    note = ("Send/recv name no peer: peers told by matching each op to the overlapping one of the same size on "
            "another rank. ")
    if why and any(x.listed for v in ops.values() for x in v):
        peers, why2 = match(ops)
        why = "" if not why2 else f"{why}; nor with the end ranks' one neighbour assumed: {why2}"
        note = note[:-2] + (", the first and last rank's ops taken to go to their one neighbour in the group's list "
                            "(a linear pipeline). ")
    for o in good:
        if o.links is None or not o.links.ops:
            continue
        if why:
            if o.links.reason.startswith(NO_PEERS):
                o.links.reason = f"{o.links.reason}; nor could the other ranks' traces tell them: {why}"
            continue
        mine = [(x.pg, x.kind, peers[(o.rank, i)], x.start, x.end) for i, x in enumerate(o.links.ops)]  # rank clock
        o.actions, o.links = read_rank(o.links.raw, [_P2P(k, peer, s, e) for _, k, peer, s, e in mine])
        o.p2p, o.links.note = mine, note


def match(ops: dict[int, list[P2POp]]) -> tuple[dict[tuple[int, int], int], str]:
    """((rank, op index) -> peer for every op, "") or ({}, why not), `ops` on the common clock."""
    for v in ops.values():
        for x in v:
            missing = sorted(set(x.ranks or ()) - set(ops))
            if x.peer is None and missing:
                return {}, f"group '{x.pg}' has ranks without send/recv in the traces ({missing[:8]})"
    m = _Matcher(ops)
    while m.step():
        pass
    if m.why:
        return {}, m.why
    left = [k for u in m.units for k in u if k not in m.peer]
    if left:
        return {}, (f"{len(left)} send/recv (rank {left[0][0]} first) overlap ops of the same size on more than one "
                    "rank: which one is the peer cannot be told")
    return m.peer, _check(ops, m.peer)


class _Matcher:
    """The deductions, each forced by evidence alone: never a choice between two possible peers."""

    def __init__(self, ops: dict[int, list[P2POp]]):
        self.ops, self.why = ops, ""
        self.peer = {(r, i): x.peer for r, v in ops.items() for i, x in enumerate(v) if x.peer is not None}
        self.no: set[tuple[int, int, int]] = set()  # (rank, op, q): the op cannot be q's
        self.by_pg: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)  # (group, kind) -> ops by start
        units: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # ops that share one peer
        for r, v in ops.items():
            for i, x in enumerate(v):
                self.by_pg[(x.pg, x.kind)].append((r, i))
                if x.peer is None:  # a single op's stream is its peer pair's communicator; a batch's the group's
                    units[(r, x.pg, x.stream) if not x.batched else (r, i)].append((r, i))
        self.spans: dict[tuple[str, str], _Spans] = {}
        for key, keys in self.by_pg.items():
            keys.sort(key=lambda k: ops[k[0]][k[1]].start)
            self.spans[key] = _Spans(ops, keys)
        self.units = list(units.values())

    def fits(self, r: int, i: int, q: int, j: int) -> bool:
        """Could op j on q be the counterpart of op i on r: opposite kinds, overlapping, same size, peers allowing."""
        x, y = self.ops[r][i], self.ops[q][j]
        return (q != r and x.kind != y.kind and x.pg == y.pg and y.start < x.end and x.start < y.end
                and _same_size(x, y) and self.peer.get((q, j), r) == r and self.peer.get((r, i), q) == q
                and (q, j, r) not in self.no and (r, i, q) not in self.no)

    def counterparts(self, r: int, i: int) -> list[tuple[int, int]]:
        x = self.ops[r][i]
        spans = self.spans.get((x.pg, "recv" if x.kind == "send" else "send"))
        return [(q, j) for q, j in spans.overlapping(x) if self.fits(r, i, q, j)] if spans else []

    def step(self) -> bool:
        """One round of every rule; True if anything was learnt."""
        n = len(self.peer) + len(self.no)
        for unit in self.units:  # the ranks an op's possible counterparts lie on: one left is its peer
            ranks = {self.peer[k] for k in unit if k in self.peer} or None
            for r, i in unit:
                mine = {q for q, _ in self.counterparts(r, i)}
                ranks = mine if ranks is None else ranks & mine
            if not ranks:
                r, i = unit[0]
                self.why = (f"a {self.ops[r][i].kind} on rank {r} overlaps no op of the same size on a rank that "
                            "could be its peer")
                return False
            if len(ranks) == 1:
                q = next(iter(ranks))
                self.peer.update((k, q) for k in unit)
        for (r, i), q in list(self.peer.items()):  # from the told side: one possible counterpart left is its own
            if q in self.ops:
                c = [k for k in self.counterparts(r, i) if k[0] == q]
                if len(c) == 1 and c[0] not in self.peer:
                    self.peer[c[0]] = r
        self._in_order()
        return not self.why and len(self.peer) + len(self.no) > n

    def _in_order(self) -> None:
        """NCCL pairs the n-th send a→b with the n-th receive on b from a. Where every op of one kind on rank a is
        told, its ops to b map in order onto b's possible counterparts: each lies between its earliest and its
        latest such mapping. One place left: that op is its counterpart; an op of b in no op's span of places
        is not from a."""
        for a, v in self.ops.items():
            for kind in ("send", "recv"):
                mine = [i for i, x in enumerate(v) if x.kind == kind]
                if not mine or any((a, i) not in self.peer for i in mine):
                    continue
                for b in sorted({self.peer[(a, i)] for i in mine} & set(self.ops)):
                    told = [i for i in mine if self.peer[(a, i)] == b]
                    other = [j for j, y in enumerate(self.ops[b]) if y.kind != kind
                             and self.peer.get((b, j), a) == a and (b, j, a) not in self.no]
                    bounds = self._bounds(a, told, b, other)
                    if bounds is None:
                        self.why = f"rank {a}'s {kind}s with rank {b} do not map in order onto overlapping ops of it"
                        return
                    reach = set()
                    for n, i in enumerate(told):
                        fits = [p for p in range(bounds[0][n], bounds[1][n] + 1) if self.fits(a, i, b, other[p])]
                        reach.update(fits)
                        if len(fits) == 1:
                            self.peer.setdefault((b, other[fits[0]]), a)
                    self.no.update((b, j, a) for p, j in enumerate(other) if p not in reach and (b, j) not in self.peer)

    def _bounds(self, a: int, told: list[int], b: int, other: list[int]):
        """(earliest, latest) place in `other` of each op in `told`, mapped in order onto ops that fit it."""
        front, p = [], 0
        for i in told:
            while p < len(other) and not self.fits(a, i, b, other[p]):
                p += 1
            if p == len(other):
                return None
            front.append(p)
            p += 1
        back, p = [0] * len(told), len(other) - 1
        for n in range(len(told) - 1, -1, -1):
            while p >= 0 and not self.fits(a, told[n], b, other[p]):
                p -= 1
            if p < 0:
                return None
            back[n] = p
            p -= 1
        return front, back


class _Spans:
    """The ops of one (group, kind) sorted by start, with the running maximum of their ends: the ops that overlap
    a span lie between two bisections (first running end past its start, last start before its end), so each
    lookup reads only the overlapping stretch, not every op before it."""

    def __init__(self, ops, keys: list[tuple[int, int]]):
        self.keys = keys
        self.starts = [ops[q][j].start for q, j in keys]
        self.reach = list(accumulate((ops[q][j].end for q, j in keys), max))
        self.ops = ops

    def overlapping(self, x: P2POp):
        lo, hi = bisect_right(self.reach, x.start), bisect_left(self.starts, x.end)
        for q, j in self.keys[lo:hi]:
            if self.ops[q][j].end > x.start:
                yield q, j


def _same_size(a: P2POp, b: P2POp) -> bool:
    return not a.size or not b.size or a.size == b.size


def _check(ops, peer) -> str:
    """"" when every pair matches as NCCL pairs it (n-th send a→b with the n-th receive on b from a, overlapping)."""
    pairs = ordered_pairs((x.pg, x.kind, r, peer[(r, i)], x) for r, v in ops.items() for i, x in enumerate(v))
    for key, (a, b) in pairs.items():
        if len(a) != len(b):
            return f"rank {key[1]} sends {len(a)} to rank {key[2]}, which receives {len(b)} from it"
        for n, (s, t) in enumerate(zip(a, b)):
            if not (s.start < t.end and t.start < s.end):
                return f"send {n} from rank {key[1]} to rank {key[2]} does not overlap its receive"
    return ""
