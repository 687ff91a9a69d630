"""What-if gains simulated on a rank's dependency graph (graph.py): edit some edges' weights, re-time every node,
and read how much earlier each step ends.

Weights. Every edge u -> v weighs what the dependency itself costs: its binding edge (the in-edge v waited on
last, Graph.binding) the time between its points in the trace (host work, an op's duration, a launch delay, a
stream gap, a sync's return); an edge that had slack (v waited on something else) only the floor of its kind,
the median weight of that kind's binding edges (0 for a host thread's point: a blocking call's end that waited
on its device costs nothing of its own beyond its sync edge). So the unedited graph re-times to the trace's own
times, and a node moves earlier as soon as what it really waited on does, down to what its other dependencies
allow (a kernel queued behind a shortened one starts right after it, never before its launch).

Re-timing. A node's new time is the max over its in-edges of (source's new time + weight); a node with no
in-edge keeps its time. The nodes form chains (a host thread's points, a stream's begin/end points), each point
with at most one in-edge from its chain; launches, waits, syncs and hand-overs between threads cross chains. The
re-timing is one pass: over the anchors (where something enters a chain run: its first point, a cross edge's end)
in a topological order computed once per rank (`_topo`: the time order, or Kahn's), a Python step per anchor and
per cross edge; the points between two anchors of a run follow by their chain weights in numpy. Linear in the edges, and it always
settles. The graph is a DAG: every edge points forward in trace time (ties are settled by chain order), but for
a device clock running ahead of the host's (a kernel that begins before its launch call); the loop that closes
through a sync on such an op is not drawn (blocking.py: a call waits only on ops launched before it), and any loop a hostile trace still closes
is cut at its earliest anchor, which reads what is not re-timed yet at its trace time.

Gain. A step's simulated length is the time from its window's start to the next window's start (the step's
period: a step whose device finishes earlier only idles longer when its host sets the next start), and the last
step's from its start to its end. The gain is the mean over the steps of (old length − new length); with two
steps or more the last step is left out of the mean (no next start says whether its earlier end would help).
Edges are edited only inside the windows.

The graph as read here (sim_graph.py with_queue_edges): graph.py's, plus an edge into each launch call that blocked on a full launch
queue, less each sync edge from an op launched after the sync (a skewed clock's); and nothing is simulated
where the graph does not explain the steps (unexplained_share).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial

import numpy as np

from llmdiag.diagnose.io.trace import COMM, RankTrace
from llmdiag.diagnose.metrics.rank.critical_path.graph import (DEVICE, LAUNCH, STREAM, SYNC_EDGE, THREAD, WAIT, C,
                                                               Graph, build)
from llmdiag.diagnose.metrics.rank.critical_path.sim_graph import (UNEXPLAINED_SHARE, kahn, thread_order,
                                                                   with_queue_edges, unexplained_share)
from llmdiag.diagnose.metrics.rank.norm_fusion import chain_kernels, fused_weights
from llmdiag.diagnose.metrics.rank.precision import fp32_gemm_kernels
from llmdiag.diagnose.metrics.rank.sets import median  # np.median without its numpy.ma import (~7 ms)
from llmdiag.diagnose.model.format import NS_PER_MS

MAX_GROUPS = 8  # process groups simulated one by one (the longest by time); all communication is one more
NEG = np.int64(-(2**62))


class Simulator:
    """One rank's graph with its weights and chains, ready to re-time under edits (`gain`)."""

    def __init__(self, t: RankTrace, g: Graph, wins, pred_edge: np.ndarray | None = None):
        """`pred_edge`: Graph.binding()'s for `g` where the caller has it (used where no queue edge is added)."""
        # no SYNC edge comes from an op launched after its call (blocking.py, resume.py: a device clock running
        # ahead of the host's once closed loops here; a loop a hostile trace still closes is cut in the order)
        g2, self.queue = with_queue_edges(t, g)
        if g2 is not g or pred_edge is None:
            pred_edge = g2.binding()[0]
        g = g2
        self.g, self.wins = g, wins
        self.t0 = g.time
        self.pred_edge = pred_edge
        obs = g.time[g.dst] - g.time[g.src]  # negative only where a skewed clock put a source after its end
        binding = np.zeros(len(g.src), bool)
        binding[pred_edge[pred_edge >= 0]] = True
        w = obs.copy()
        for ty in (LAUNCH, STREAM, WAIT, SYNC_EDGE):
            m = g.etype == ty
            b = obs[m & binding]
            floor = int(median(b)) if len(b) else 0
            w[m & ~binding] = np.minimum(obs[m & ~binding], max(floor, 0))
        w[(g.etype == THREAD) & ~binding] = np.minimum(obs[(g.etype == THREAD) & ~binding], 0)
        self.w = w
        self._chains(t)
        # the edges inside the windows (by their end point), the only ones a scenario edits
        self.in_win = np.zeros(len(g.src), bool)
        if len(g.src):
            td = g.time[g.dst]
            for win in wins:
                self.in_win |= (td > win.start) & (td <= win.end)

    def _chains(self, t: RankTrace) -> None:
        """Every node in chain order (host threads in nesting order, streams in time order), per position its
        chain in-edge from the position before (-1 where a chain, or a run of linked points, begins), the anchors
        (positions where something enters a run: its first point, a cross edge's end) and the order they are
        re-timed in (`_topo`). All of it is the graph's structure: the same for every what-if."""
        g = self.g
        dk = np.flatnonzero(g.device)
        parts = [thread_order(t, g)]
        if len(dk):
            st = t.stream[g.ev[dk]]
            o = dk[np.lexsort((g.time[2 * dk + 1], g.time[2 * dk], st))]
            parts.append(np.stack([2 * o, 2 * o + 1], axis=1).ravel())
        seen = np.zeros(g.nodes, bool)
        seen[parts[0]] = True
        seen[2 * dk], seen[2 * dk + 1] = True, True
        parts.append(np.flatnonzero(~seen))  # none in a graph.py graph; alone, they keep their times
        order = np.concatenate(parts)
        pos_of = np.empty(g.nodes, np.int64)
        pos_of[order] = np.arange(len(order))
        # a chain edge links two neighbours of one chain; a hand-over between two threads (THREAD, resume.py) or
        # any other edge crosses chains
        ce = np.flatnonzero(np.isin(g.etype, (THREAD, DEVICE, STREAM)))
        ce = ce[pos_of[g.dst[ce]] == pos_of[g.src[ce]] + 1]
        link = np.full(len(order), -1, np.int64)
        link[pos_of[g.dst[ce]]] = ce
        self.order, self.pos_of, self.link = order, pos_of, link
        cross = np.ones(len(g.src), bool)
        cross[link[link >= 0]] = False
        xe = np.flatnonzero(cross)  # every edge not linking two neighbours of one chain
        self.seg = link < 0  # a run of linked points begins here
        anchor = self.seg.copy()
        anchor[pos_of[g.dst[xe]]] = True
        self.anchors = np.flatnonzero(anchor)  # positions
        # per position, the anchor (index into anchors) whose run segment holds it
        self.aidx = np.cumsum(anchor) - 1
        xa = self.aidx[pos_of[g.dst[xe]]]  # the anchor each cross edge enters
        o = np.argsort(xa, kind="stable")
        self.xe, self.xa = xe[o], xa[o]  # cross edges grouped by the anchor they enter
        self.xbounds = np.searchsorted(self.xa, np.arange(len(self.anchors) + 1))
        # what every re-timing reads of the chains and anchors alone, whatever the weights
        self.link_at = np.maximum(link, 0)
        self.seg_first, self.seg_id = np.flatnonzero(self.seg), np.cumsum(self.seg) - 1
        self.xsrc = pos_of[g.src[self.xe]]  # each cross edge's source position
        self.ins = _by_anchor(self.aidx[self.xsrc].tolist(), self.xbounds.tolist())
        self.anchor_nodes = order[self.anchors]
        self.anchor_t0 = self.t0[self.anchor_nodes]
        self.anchor_first = self.seg[self.anchors].tolist()
        self.proc = self._topo()

    def _topo(self) -> list[int]:
        """The anchors in a topological order of what they wait on (the anchor before in their run, the anchors
        their cross edges come from): the trace's time order where it is one, else Kahn's algorithm, ready anchors in
        the trace's time order. The graph is a
        DAG wherever every edge points forward in trace time (ties included: chain order and Kahn's order settle
        them). Only a skewed clock (a kernel that begins before its launch call, two ops of one stream that
        overlap) can close a loop; Kahn then stalls, and the loop is cut at its earliest anchor in trace time
        (then position): it is re-timed at once, reading what it waits on that is not re-timed yet at its trace
        time (the chain weights since its run's anchor applied). One step per anchor and per edge between
        anchors."""
        self.cuts = 0  # anchors re-timed before all they wait on: where a loop was cut
        if not len(self.anchors):
            return []
        u, v, by_time = self._anchor_edges()
        rank = np.empty(len(by_time), np.int64)
        rank[by_time] = np.arange(len(by_time))
        if (rank[u] < rank[v]).all():
            # the time order is already topological (every anchor waits only on earlier ones: no loop, so Kahn's
            # would cut none), and every topological order re-times alike (each anchor reads only finished ones):
            # taken as it is, without Kahn's Python loop (2-3 ms a rank)
            return by_time.tolist()
        return self._kahn(u, v, by_time)

    def _anchor_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(u, v): anchor v waits on anchor u; and the anchors in trace time order (then position)."""
        g = self.g
        src_a = self.aidx[self.pos_of[g.src[self.xe]]]
        chain = np.flatnonzero(~self.seg[self.anchors])  # anchors that read the anchor before them
        u = np.r_[src_a, chain - 1]
        v = np.r_[self.xa, chain]
        keep = u != v  # an edge from an anchor's own run segment into it: a loop of one, cut
        return u[keep], v[keep], np.argsort(self.anchor_t0, kind="stable")

    def _kahn(self, u: np.ndarray, v: np.ndarray, by_time_a: np.ndarray) -> list[int]:
        """`_topo`'s order by Kahn's algorithm (sim_graph.kahn); counts the loops it cut in `cuts`."""
        out, cuts = kahn(self.anchor_t0, u, v, by_time_a)
        self.cuts += cuts
        return out

    def retime(self, w: np.ndarray) -> np.ndarray:
        """The nodes' times under edge weights `w` (NEG: a cross edge removed; a chain edge is never removed, an
        op's duration may be 0): one pass over the anchors in topological order (`_topo`), a Python loop over them
        and their cross edges only; between anchors a run's time is its chain weight (numpy). A point's time is
        the max over its in-edges of (source's time + weight); a point with no in-edge keeps its trace time."""
        g, order, link = self.g, self.order, self.link
        lw = w[self.link_at]
        if ((link >= 0) & (lw <= NEG)).any():
            raise ValueError("a chain edge cannot be removed")
        live = w > NEG
        has_in = np.zeros(g.nodes, bool)
        has_in[g.dst[live]] = True
        seg, anchors, aidx = self.seg, self.anchors, self.aidx
        cum = np.cumsum(np.where(seg, 0, lw))
        wrel = cum - cum[self.seg_first][self.seg_id]  # chain weight from the run's first point
        xe = self.xe
        ins = self.ins  # per anchor its cross edges: (the anchor each source reads its time from, the edge's slot)
        xoff = np.where(live[xe], wrel[self.xsrc] + w[xe], NEG).tolist()
        M = (self.anchor_t0 - wrel[anchors]).tolist()  # an anchor not re-timed yet (a cut loop) reads its trace time
        base = np.where(has_in[self.anchor_nodes], NEG, self.anchor_t0).tolist()
        wr = wrel[anchors].tolist()
        first = self.anchor_first
        neg = int(NEG)
        for i in self.proc:
            c = base[i]
            for j, k in ins[i]:
                off = xoff[k]
                if off != neg:
                    v = M[j] + off
                    if v > c:
                        c = v
            a = c - wr[i]
            if not first[i] and M[i - 1] > a:
                a = M[i - 1]
            M[i] = a
        T = np.empty(g.nodes, np.int64)
        T[order] = wrel + np.array(M, np.int64)[aidx]
        return T

    def boundaries(self, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(new start, new end) per window: the earliest new time of the points at the window's first time at or
        after its start, the latest of those at its last time at or before its end (the window's own points)."""
        o = self.g.time_order()
        ts = self.t0[o]
        starts, ends = [], []
        for win in self.wins:
            i = int(np.searchsorted(ts, win.start, side="left"))
            if i < len(ts):
                j = int(np.searchsorted(ts, ts[i], side="right"))
                starts.append(win.start - int(self.t0[o[i]] - T[o[i:j]].min()) if ts[i] <= win.end else win.start)
            else:
                starts.append(win.start)
            k = int(np.searchsorted(ts, win.end, side="right")) - 1
            if k >= 0:
                lo = int(np.searchsorted(ts, ts[k], side="left"))
                ends.append(win.end - int(self.t0[o[k]] - T[o[lo:k + 1]].max()))
            else:
                ends.append(win.end)
        return np.array(starts, np.int64), np.array(ends, np.int64)

    def lengths(self, T: np.ndarray) -> np.ndarray:
        """Per step, ns from its start to the next step's start (the last: to its end)."""
        s, e = self.boundaries(T)
        return np.r_[s[1:], e[-1]] - s

    def gain(self, edited: np.ndarray) -> tuple[float, list[float]] | None:
        """(mean ms per step the edit takes off the steps, each step's new length in ms) for edited weights (same
        edges; NEG removes a cross edge); None without windows."""
        if not len(self.wins):
            return None
        # the unedited weights re-time to the trace's own times by construction (a point's binding edge weighs its
        # gap, every other in-edge no more; a point with no in-edge keeps its time): no pass needed for them
        base = self.t0
        new = self.retime(edited)
        old_len, new_len = self.lengths(base), self.lengths(new)
        d = old_len - new_len
        gain = float(d[:-1].mean() if len(d) > 1 else d[0]) / NS_PER_MS
        return max(gain, 0.0), (new_len / NS_PER_MS).tolist()

    def scaled(self, nodes_dev: np.ndarray, factor: float) -> np.ndarray:
        """The weights with the DEVICE edges of these selected device events (positions in Graph.ev) inside the
        windows scaled by `factor`."""
        w = self.w.copy()
        m = np.zeros(len(self.g.ev), bool)
        m[nodes_dev] = True
        e = (self.g.etype == DEVICE) & m[self.g.src // 2] & self.in_win
        w[e] = np.rint(w[e] * factor).astype(np.int64)
        return w

    def recorded_syncs(self) -> np.ndarray:
        """Mask of the sync edges into a recorded blocking call's end (a synchronize, a synchronous copy): not a
        queue edge, nor a resume edge (resume.py: into the point a thread woke at, a begin; the trace does not say
        what the thread waited in, so no call can be named to remove), nor a free's (the allocator's: no sync the
        user wrote; `after_fix:allocator` removes those)."""
        g = self.g
        return (g.etype == SYNC_EDGE) & (g.dst % 2 == 1) & ~self.queue & (g.cause != C["allocator"])

    def without_syncs(self) -> np.ndarray:
        """The weights with the recorded sync edges (`recorded_syncs`) inside the windows removed (the host no
        longer waits for its device in those calls: the `host_sync` rule's, which reads the idle under recorded
        blocking calls), except those from a device op that began on a stream-event wait: that time is the
        event's (the `event_wait` rule), not the synchronizing call's, and counting it here would count it
        twice."""
        g = self.g
        w = self.w.copy()
        pred_edge = self.pred_edge
        src_begin = (g.src // 2) * 2
        pe = pred_edge[src_begin]
        on_event = (pe >= 0) & (g.etype[np.maximum(pe, 0)] == WAIT)
        w[self.recorded_syncs() & self.in_win & ~on_event] = NEG
        return w


def _by_anchor(xj: list[int], xb: list[int]) -> list[tuple]:
    """Per anchor, its cross edges as (source anchor, edge slot) pairs: the re-timing's loop reads no bounds."""
    pairs = list(zip(xj, range(len(xj))))
    return [tuple(pairs[a:b]) for a, b in zip(xb, xb[1:])]


def wanted(hints, idle, exposed_comm_ms: float, norm_fusion) -> set[str]:
    """The what-ifs whose rule has evidence in the rank's metrics (the rest are not simulated): fp32 GEMMs
    evidenced ("fp32"), device idle under blocking runtime calls ("sync"), exposed communication ("comm")."""
    out = set()
    if (hints.fp32_gemm_frac or 0) > 0:
        out.add("fp32")
    if idle is not None and idle.runtime_ms > 0:
        out.add("sync")
    if exposed_comm_ms > 0:
        out.add("comm")
    if norm_fusion is not None and norm_fusion.saved_ms > 0:
        out.add("fusion")  # the chain pointwise kernels fused into their normalization (metrics/rank/norm_fusion.py)
    return out


def simulator(t: RankTrace, wins, graph=None) -> Simulator | None:
    """The rank's Simulator on `graph` (the path's, built here where None), or None where no what-if can be read
    from it: an empty graph, times with no room for their sums in int64, or steps the graph does not explain
    (`unexplained_share`). The one gate and the one build every what-if of a rank goes through."""
    if not t.is_gpu or not wins:
        return None
    g = graph if graph is not None else build(t)
    if not len(g.src) or np.abs(g.time).max() >= 2**59:
        return None
    if unexplained_share(g, wins) >= UNEXPLAINED_SHARE:
        return None
    return Simulator(t, g, wins, g.binding()[0])


def shared_simulator(t: RankTrace, wins, graph=None) -> Callable[[], Simulator | None]:
    """`simulator`, built on the first call and kept: simulated_gains, held_read_gain and after_fix_gains of one
    rank share one build (its queue edges, chains and order), and none is built where none of them simulates."""
    return cache(partial(simulator, t, wins, graph))


def simulated_gains(t: RankTrace, wins, speedup: float, groups: dict | None = None,
                    want: frozenset[str] | set[str] = frozenset({"fp32", "sync", "comm"}), graph=None,
                    sims: Callable[[], Simulator | None] | None = None) -> dict[str, float]:
    """ms per step each cause's edit takes off the rank's steps, simulated on its graph, for the causes in `want`
    (`wanted`) the trace shows: "fp32_gemm/<speed-up>" (fp32 GEMM kernels `speedup` times faster), "host_sync"
    (the host no longer waits in synchronizing calls), "comm" (communication kernels take no time) and
    "comm:<process group>" (one group's, for the MAX_GROUPS longest; `groups`: per comm event its resolved group,
    metrics/rank/groups.py). No graph is built where nothing is wanted; `graph`: the rank's graph when the path
    already built it (graph.build(t): the same graph, built once); `sims`: the rank's `shared_simulator`."""
    if not t.is_gpu or not wins or not want:
        return {}
    sim = (sims or partial(simulator, t, wins, graph))()
    if sim is None:
        return {}
    g = sim.g  # the graph plus the simulation's queue edges: the same points (Graph.ev) as the path's
    out: dict[str, float] = {}

    def run(key: str, w: np.ndarray) -> None:
        r = sim.gain(w)
        if r is not None:
            out[key] = round(r[0], 3)  # µs: a gain finer than that is noise, and 16k ranks carry it

    pos = np.full(len(t), -1, np.int64)
    pos[g.ev] = np.arange(len(g.ev))
    f32 = fp32_gemm_kernels(t) if "fp32" in want else np.zeros(0, np.int64)
    f32 = pos[f32][pos[f32] >= 0] if len(f32) else f32
    if len(f32) and speedup > 1:
        run(f"fp32_gemm/{speedup:g}", sim.scaled(f32, 1.0 / speedup))
    if "fusion" in want and (nf := chain_kernels(t, wins)) is not None and len(nf[1]) + len(nf[2]):
        run("norm_fusion", fused_weights(sim, pos[nf[1]][pos[nf[1]] >= 0], pos[nf[2]][pos[nf[2]] >= 0]))
    if "sync" in want and (sim.recorded_syncs() & sim.in_win).any():
        run("host_sync", sim.without_syncs())
    comm = (np.flatnonzero(g.device & (t.kind[g.ev] == COMM)) if t.kind is not None and "comm" in want
            else np.zeros(0, np.int64))
    if len(comm):
        run("comm", sim.scaled(comm, 0.0))
        if groups:
            label = np.array([groups[int(i)].label if int(i) in groups else "" for i in g.ev[comm].tolist()], object)
            dur = (g.time[2 * comm + 1] - g.time[2 * comm]).astype(float)
            names, inv = np.unique(label.astype(str), return_inverse=True)
            tot = np.bincount(inv, weights=dur, minlength=len(names))
            if len(names) > 1:
                for k in np.argsort(-tot)[:MAX_GROUPS].tolist():
                    if names[k]:
                        run(f"comm:{names[k]}", sim.scaled(comm[inv == k], 0.0))
    return out
