"""One dependency-graph engine for every what-if: ops of all ranks, their dependencies (stream order,
compute ↔ p2p, launch order) and synchronisation groups (a matched send/recv pair, a collective over its
group), replayed in topological order.

An op starts when all its dependencies have ended, plus its launch delay; an op with no dependency starts
at its release time (the step's start) plus its delay. An op of a synchronisation group ends when the last
member has started plus its own transfer time; others end at start + duration. Kahn's algorithm with a
queue: each op and edge is visited once, so a replay is linear in ops + edges.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


class CycleError(ValueError):
    """The dependencies contradict each other: no order runs every op."""


@dataclass
class Graph:
    n: int
    succ_ptr: list[int]  # CSR: successors of op v are succ[succ_ptr[v]:succ_ptr[v+1]]
    succ: list[int]
    indeg: list[int]
    group: list[int]  # synchronisation group of each op, −1 for none
    groups: list[list[int]]


class GraphBuilder:
    def __init__(self, n: int):
        self.n = n
        self.edges: list[tuple[int, int]] = []  # (before, after)
        self.group = [-1] * n
        self.groups: list[list[int]] = []

    def dep(self, after: int, before: int) -> None:
        if after != before:
            self.edges.append((before, after))

    def chain(self, ops: list[int]) -> None:
        for a, b in zip(ops, ops[1:]):
            self.dep(b, a)

    def sync(self, members: list[int]) -> None:
        """The members end together (each after its own transfer) once the last of them has started."""
        members = [m for m in members if self.group[m] < 0]
        if not members:
            return
        gid = len(self.groups)
        for m in members:
            self.group[m] = gid
        self.groups.append(members)

    def build(self) -> Graph:
        edges = sorted(set(self.edges))
        ptr = [0] * (self.n + 1)
        indeg = [0] * self.n
        for u, v in edges:
            ptr[u + 1] += 1
            indeg[v] += 1
        for i in range(self.n):
            ptr[i + 1] += ptr[i]
        return Graph(self.n, ptr, [v for _, v in edges], indeg, self.group, self.groups)


def simulate(g: Graph, duration: np.ndarray, delay: np.ndarray, release: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every op; `duration` is the transfer time for ops in a synchronisation group."""
    dur, dl, rel = duration.tolist(), delay.tolist(), release.tolist()
    ptr, succ, group, groups = g.succ_ptr, g.succ, g.group, g.groups
    deg = list(g.indeg)
    ready: list = [None] * g.n  # max end of the dependencies seen so far
    start = [0.0] * g.n
    end = [0.0] * g.n
    started_in = [0] * len(groups)
    queue = deque(v for v in range(g.n) if deg[v] == 0)
    pop, push = queue.popleft, queue.append
    done = 0
    while queue:
        v = pop()
        r = ready[v]
        st = start[v] = (rel[v] if r is None else r) + dl[v]
        gid = group[v]
        if gid < 0:
            ended = (v,)
            end[v] = st + dur[v]
        else:
            started_in[gid] += 1
            ended = groups[gid]
            if started_in[gid] < len(ended):
                continue
            last = max([start[m] for m in ended])
            for m in ended:
                end[m] = last + dur[m]
        done += len(ended)
        for u in ended:  # release the successors of every op that ended
            e = end[u]
            for k in range(ptr[u], ptr[u + 1]):
                w = succ[k]
                r = ready[w]
                if r is None or e > r:
                    ready[w] = e
                deg[w] -= 1
                if deg[w] == 0:
                    push(w)
    if done != g.n:
        raise CycleError(f"{g.n - done} of {g.n} ops never became ready (a dependency cycle)")
    return np.asarray(start), np.asarray(end)


def simulate_many(g: Graph, duration: np.ndarray) -> np.ndarray:
    """End of every op (rows) in each of several replays (columns) of one graph without synchronisation
    groups, each column its own durations, no delays or releases. The ops are taken level by level (an op's
    level: one more than its deepest dependency's), each level in a few array operations over all its ops and
    replays at once, so the cost grows with the graph's depth, not with ops × replays (the what-if predictions
    average replays over the run's measured variation: diagnose.simulate.predict)."""
    if g.groups:
        raise ValueError("simulate_many replays graphs without synchronisation groups")
    ptr, succ = g.succ_ptr, g.succ
    deg = list(g.indeg)
    level = [0] * g.n
    queue = deque(v for v in range(g.n) if deg[v] == 0)
    order = []
    while queue:
        v = queue.popleft()
        order.append(v)
        for k in range(ptr[v], ptr[v + 1]):
            w = succ[k]
            if level[v] + 1 > level[w]:
                level[w] = level[v] + 1
            deg[w] -= 1
            if deg[w] == 0:
                queue.append(w)
    if len(order) != g.n:
        raise CycleError(f"{g.n - len(order)} of {g.n} ops never became ready (a dependency cycle)")
    src = np.repeat(np.arange(g.n), np.diff(np.asarray(ptr, dtype=np.int64)))  # edge k: src[k] -> succ[k]
    dst = np.asarray(succ, dtype=np.int64)
    lv = np.asarray(level, dtype=np.int64)
    end = np.empty_like(duration, dtype=np.float64)
    by_level = np.argsort(lv, kind="stable")
    bounds = np.searchsorted(lv[by_level], np.arange(lv.max() + 2 if g.n else 1))
    e_order = np.lexsort((dst, lv[dst]))  # edges grouped by their target's level, then by target
    e_lv = lv[dst[e_order]]
    e_bounds = np.searchsorted(e_lv, np.arange(lv.max() + 2 if g.n else 1))
    for L in range(len(bounds) - 1):
        ops = by_level[bounds[L]:bounds[L + 1]]
        end[ops] = duration[ops]
        es = e_order[e_bounds[L]:e_bounds[L + 1]]
        if len(es):
            targets = dst[es]
            cut = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            ready = np.maximum.reduceat(end[src[es]], cut, axis=0)
            end[targets[cut]] += ready
    return end
