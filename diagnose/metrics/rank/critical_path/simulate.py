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
with at most one in-edge from its chain; launches, waits and syncs cross chains. One round solves every chain at
once in numpy given the current times of the other chains (a segmented max-plus scan); rounds repeat until no
time changes, so the rounds are the host/device hand-overs a change travels through. A round is linear in the
edges; rounds are capped (MAX_ROUNDS): a hostile trace whose times close a loop, or a trace with more hand-overs
than that, gets no simulated gain (the rules keep their bounds), never a hang.

Gain. A step's simulated length is the time from its window's start to the next window's start (the step's
period: a step whose device finishes earlier only idles longer when its host sets the next start), and the last
step's from its start to its end. The gain is the mean over the steps of (old length − new length); with two
steps or more the last step is left out of the mean (no next start says whether its earlier end would help).
Edges are edited only inside the windows.

The graph as read here (sim_graph.py): graph.py's, plus an edge into each launch call that blocked on a full launch
queue; and nothing is simulated where the graph does not explain the steps (unexplained_share).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMM, RankTrace
from llmdiag.diagnose.metrics.rank.critical_path.graph import (DEVICE, LAUNCH, STREAM, SYNC_EDGE, THREAD, WAIT, Graph,
                                                               build)
from llmdiag.diagnose.metrics.rank.critical_path.sim_graph import (UNEXPLAINED_SHARE, thread_order, unexplained_share,
                                                                   with_queue_edges)
from llmdiag.diagnose.metrics.rank.precision import fp32_gemm_kernels
from llmdiag.diagnose.model.format import NS_PER_MS

MAX_ROUNDS = 16  # host/device hand-overs one change may travel through; beyond: no simulated gain (a trace that
# does not settle by then, trace_diff control with its resume edges, did not by 256 either: 0.8 s per what-if spent)
MAX_GROUPS = 8  # process groups simulated one by one (the longest by time); all communication is one more
NEG = np.int64(-(2**62))


class Simulator:
    """One rank's graph with its weights and chains, ready to re-time under edits (`gain`)."""

    def __init__(self, t: RankTrace, g: Graph, wins, pred_edge: np.ndarray | None = None):
        """`pred_edge`: Graph.binding()'s for `g` where the caller has it (used where no queue edge is added)."""
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
            floor = int(np.median(b)) if len(b) else 0
            w[m & ~binding] = np.minimum(obs[m & ~binding], max(floor, 0))
        w[(g.etype == THREAD) & ~binding] = np.minimum(obs[(g.etype == THREAD) & ~binding], 0)
        self.w = w
        self._chains(t)
        self._sorted: np.ndarray | None = None  # the points in time order, for the windows' boundaries
        # the edges inside the windows (by their end point), the only ones a scenario edits
        self.in_win = np.zeros(len(g.src), bool)
        if len(g.src):
            td = g.time[g.dst]
            for win in wins:
                self.in_win |= (td > win.start) & (td <= win.end)

    def _chains(self, t: RankTrace) -> None:
        """Every node in chain order (host threads in nesting order, streams in time order) and, per position,
        its chain in-edge from the position before (-1 where a chain, or a run of linked points, begins)."""
        g = self.g
        dk = np.flatnonzero(g.device)
        parts = [thread_order(g)]
        if len(dk):
            st = t.stream[g.ev[dk]]
            o = dk[np.lexsort((g.time[2 * dk + 1], g.time[2 * dk], st))]
            parts.append(np.stack([2 * o, 2 * o + 1], axis=1).ravel())
        seen = np.zeros(g.nodes, bool)
        seen[parts[0]] = True
        seen[2 * dk], seen[2 * dk + 1] = True, True
        parts.append(np.flatnonzero(~seen))  # none in a graph.py graph; alone, they keep their times
        order = np.concatenate(parts)
        chain_edge = np.full(g.nodes, -1, np.int64)  # per node, its in-edge of THREAD/DEVICE/STREAM
        ce = np.flatnonzero(np.isin(g.etype, (THREAD, DEVICE, STREAM)))
        chain_edge[g.dst[ce]] = ce
        prev = np.r_[-1, order[:-1]]
        e = chain_edge[order]
        linked = (e >= 0) & (g.src[np.maximum(e, 0)] == prev)
        self.order = order
        self.link = np.where(linked, e, -1)  # per position
        cross = np.ones(len(g.src), bool)
        cross[self.link[linked]] = False
        self.cross = np.flatnonzero(cross)  # every edge not linking two neighbours of one chain

    def retime(self, w: np.ndarray, start: np.ndarray) -> np.ndarray | None:
        """The nodes' times under edge weights `w` (NEG: edge removed): one sweep in the trace's time order, then
        rounds until no time changes (the sweep leaves work only where ties or a skewed clock put a dependency
        after its dependant); None when they do not settle within MAX_ROUNDS. `start`: the times an edge from a
        not-yet-swept point reads."""
        g, order = self.g, self.order
        live = w > NEG
        has_in = np.zeros(g.nodes, bool)
        has_in[g.dst[live]] = True
        xe = self.cross[live[self.cross]]
        xe = xe[np.argsort(g.dst[xe], kind="stable")]
        xd = g.dst[xe]
        firsts = np.flatnonzero(np.r_[True, xd[1:] != xd[:-1]]) if len(xd) else np.zeros(0, np.int64)
        link = np.where((self.link >= 0) & live[np.maximum(self.link, 0)], self.link, -1)
        seg = link < 0  # a run of linked points begins here
        cum = np.cumsum(np.where(seg, 0, w[np.maximum(link, 0)]))
        seg_id = np.cumsum(seg) - 1
        wrel = cum - cum[np.flatnonzero(seg)][seg_id]  # chain weight from the run's first point
        T = self._sweep(w, xe, seg, wrel, has_in, start)
        for _ in range(MAX_ROUNDS):
            c = np.full(g.nodes, NEG, np.int64)
            c[~has_in] = self.t0[~has_in]
            if len(xe):
                c[xd[firsts]] = np.maximum.reduceat(T[g.src[xe]] + w[xe], firsts)
            new = np.empty_like(T)
            new[order] = _seg_cummax(c[order] - np.where(c[order] > NEG, wrel, 0), seg, seg_id) + wrel
            if np.array_equal(new, T):
                return T
            T = new
        return None

    def _sweep(self, w, xe, seg, wrel, has_in, start) -> np.ndarray:
        """The times in one pass over the points where something enters a chain run (its first point, a cross
        edge's end), in the trace's time order; between them a run's time is its chain weight (numpy). A Python
        loop over those points and their cross edges only: one step each."""
        g, order = self.g, self.order
        pos_of = np.empty(g.nodes, np.int64)
        pos_of[order] = np.arange(len(order))
        anchor = seg.copy()
        anchor[pos_of[g.dst[xe]]] = True
        anchors = np.flatnonzero(anchor)  # positions
        aidx = np.searchsorted(anchors, np.maximum.accumulate(np.where(anchor, np.arange(len(order)), 0)))
        nodes = order[anchors]
        rank = np.empty(len(anchors), np.int64)
        proc = np.argsort(self.t0[nodes], kind="stable")  # a run's anchors keep their order at ties
        rank[proc] = np.arange(len(anchors))
        xa = rank[aidx[pos_of[g.dst[xe]]]]  # the processing rank of each cross edge's end
        o = np.argsort(xa, kind="stable")
        xe, xa = xe[o], xa[o]
        sp = pos_of[g.src[xe]]
        xj = aidx[sp].tolist()  # the anchor each source reads its time from, plus its offset
        xoff = (wrel[sp] + w[xe]).tolist()
        xa_l = xa.tolist() + [len(anchors)]
        M = (start[nodes] - wrel[anchors]).tolist()  # what a not-yet-swept anchor holds
        base = np.where(has_in[nodes], NEG, self.t0[nodes]).tolist()
        wr = wrel[anchors].tolist()
        first = seg[anchors].tolist()
        k = 0
        for r, i in enumerate(proc.tolist()):
            c = base[i]
            while xa_l[k] == r:
                v = M[xj[k]] + xoff[k]
                if v > c:
                    c = v
                k += 1
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
        if self._sorted is None:
            self._sorted = np.argsort(self.t0, kind="stable")
        o = self._sorted
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
        edges; NEG removes an edge); None when the re-timing does not settle."""
        if not len(self.wins):
            return None
        # the unedited weights re-time to the trace's own times by construction (a point's binding edge weighs its
        # gap, every other in-edge no more; a point with no in-edge keeps its time): no pass needed for them
        base = self.t0
        new = self.retime(edited, base)
        if new is None:
            return None
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

    def without_syncs(self) -> np.ndarray:
        """The weights with the sync edges inside the windows removed (the host no longer waits for its device),
        except those from a device op that began on a stream-event wait: that time is the event's (the
        `event_wait` rule), not the synchronizing call's, and counting it here would count it twice."""
        g = self.g
        w = self.w.copy()
        pred_edge = self.pred_edge
        src_begin = (g.src // 2) * 2
        pe = pred_edge[src_begin]
        on_event = (pe >= 0) & (g.etype[np.maximum(pe, 0)] == WAIT)
        w[(g.etype == SYNC_EDGE) & self.in_win & ~on_event & ~self.queue] = NEG
        return w


def _seg_cummax(x: np.ndarray, seg: np.ndarray, seg_id: np.ndarray) -> np.ndarray:
    """Running max of x restarting where `seg` is set (the first of each run is a real value, NEG entries never
    win). One pass with an offset per run where the int64 range allows; else one pass per run."""
    if not len(x):
        return x
    valid = x > NEG // 2
    lo, hi = int(x[valid].min()), int(x[valid].max())
    span = hi - lo + 2
    runs = int(seg_id[-1]) + 1
    if span * runs < 2**62:
        y = np.where(valid, x - lo + 1, 0) + seg_id * span
        return np.maximum.accumulate(y) - seg_id * span + lo - 1
    out = np.empty_like(x)
    bounds = np.r_[np.flatnonzero(seg), len(x)]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # hostile spans only
        out[a:b] = np.maximum.accumulate(x[a:b])
    return out


def wanted(m) -> set[str]:
    """The what-ifs whose rule has evidence in these RankMetrics (the rest are not simulated): fp32 GEMMs
    evidenced ("fp32"), device idle under blocking runtime calls ("sync"), exposed communication ("comm")."""
    out = set()
    if (m.hints.fp32_gemm_frac or 0) > 0:
        out.add("fp32")
    if m.idle is not None and m.idle.runtime_ms > 0:
        out.add("sync")
    if m.exposed_comm_ms > 0:
        out.add("comm")
    return out


def simulated_gains(t: RankTrace, wins, speedup: float, groups: dict | None = None,
                    want: frozenset[str] | set[str] = frozenset({"fp32", "sync", "comm"}), graph=None
                    ) -> dict[str, float]:
    """ms per step each cause's edit takes off the rank's steps, simulated on its graph, for the causes in `want`
    (`wanted`) the trace shows: "fp32_gemm/<speed-up>" (fp32 GEMM kernels `speedup` times faster), "host_sync"
    (the host no longer waits in synchronizing calls), "comm" (communication kernels take no time) and
    "comm:<process group>" (one group's, for the MAX_GROUPS longest; `groups`: per comm event its resolved group,
    metrics/rank/groups.py). No graph is built where nothing is wanted; `graph`: the rank's graph when the path
    already built it (graph.build(t): the same graph, built once)."""
    if not t.is_gpu or not wins or not want:
        return {}
    g = graph if graph is not None else build(t)
    if not len(g.src) or np.abs(g.time).max() >= 2**59:  # no room for sums of times in int64: no simulation
        return {}
    binding = g.binding()
    if unexplained_share(g, wins, binding) >= UNEXPLAINED_SHARE:
        return {}
    sim = Simulator(t, g, wins, binding[0])
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
    if "sync" in want and ((sim.g.etype == SYNC_EDGE) & sim.in_win & ~sim.queue).any():
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
