"""HTA's lightweight critical path (`analyze --hta-compat`), reimplemented from its definition
(HolisticTraceAnalysis, hta/analyzers/critical_path_analysis.py, 0.5.0) so its split can be reproduced.

HTA's graph over one annotation's window [S, E] (host events beginning in it; device events whose launch does):
- host ops (cat cpu_op) and runtime/driver calls, per thread in nesting order, each edge weighing the time
  between its points, except: between two top-level ops a zero-weight edge (the gap is not on HTA's path), and
  into the end of a blocking call (synchronize, cudaMemcpy(Async), cudaEventQuery) zero weight;
- a device op's span; a launch edge (launch call's begin -> kernel's begin) only where the stream's queue was empty
  at the launch and at the kernel's start and the previous op on the stream ended before the launch; else a
  kernel-kernel edge from the previous op on its stream;
- zero-weight sync edges: Stream Sync / Context Sync (the last op on the stream / every stream -> the call's end),
  Event Sync and Stream Wait Event through the cudaEventRecord they name (`wait_on_cuda_event_record_corr_id`):
  the op launched last on the recorded stream before the record -> the call's end, or -> the first op launched on
  the waiting stream after the wait from its thread.
The path is the longest weighted path of that DAG; its split is the weight per category over the total weight.
Unlike graph.py this runs Python per event of the window: an opt-in compatibility mode for one rank.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.model.critical_path import CATEGORIES

LAUNCHES = frozenset(("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                      "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemsetAsync", "hipMemcpyAsync",
                      "hipMemcpyWithStream", "runFunction - job_prep_and_submit_for_execution"))
BLOCKING = frozenset(("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize",
                      "cudaMemcpy", "cudaMemcpyAsync"))
NODE_CATS = ("cpu_op", "cuda_runtime", "cuda_driver")
CPU, COMPUTE, COMM, LAUNCH, KK, NONE = range(6)
CAT_NAMES = {CPU: "cpu_bound", COMPUTE: "gpu_compute_bound", COMM: "gpu_communication_bound",
             LAUNCH: "gpu_kernel_launch_overhead", KK: "gpu_kernel_kernel_overhead"}
assert set(CAT_NAMES.values()) == set(CATEGORIES)


def _ids(t: RankTrace, names) -> np.ndarray:
    """A table over the interned names: True for those in `names` (index it with a name column)."""
    table = np.zeros(len(t.names), bool)
    table[[i for i, n in enumerate(t.names) if n in names]] = True
    return table


def _hta_times(t: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """Times as HTA reads them: a trace with sub-µs times has its begins rounded up and its ends down to whole µs
    (HTA's round_down_time_stamps: sub-µs ops get no duration and leave its graph). In ns, as ours."""
    if not len(t) or not ((t.ts % 1000).any() or (t.dur % 1000).any()):
        return t.ts, t.dur
    ts = -(-t.ts // 1000) * 1000
    end = (t.ts + t.dur) // 1000 * 1000
    return ts, end - ts


class HtaRank:
    """What HTA reads off the full trace once: correlation links, queue lengths, event records, stream waits."""

    def __init__(self, t: RankTrace):
        self.t = t
        n = len(t)
        self.ts, self.dur = _hta_times(t)
        self.sync_cat = t.cat_mask("cuda_sync")
        self.gpu = (t.stream >= 0) | self.sync_cat  # HTA's GPU side: stream events and cuda_sync markers
        self.link = np.full(n, -1, np.int64)  # HTA's index_correlation: the linked event across host/device
        host = np.flatnonzero(~self.gpu & (t.corr >= 0))
        dev = np.flatnonzero(self.gpu & (t.corr >= 0))
        by_corr = dict(zip(t.corr[host].tolist(), host.tolist()))
        for d, c in zip(dev.tolist(), t.corr[dev].tolist()):
            h = by_corr.get(c)
            if h is not None:
                self.link[d], self.link[h] = h, d
        self.names = [t.names[i] for i in t.name.tolist()]
        self._queues()
        self._records()
        self._stream_waits()

    def _queues(self) -> None:
        """Per launched device op: HTA's queue length on its stream at its launch and at its start (+1 at each
        launch, -1 at each start, in time order per stream)."""
        t = self.t
        is_launch = _ids(t, LAUNCHES)[t.name] & ~self.gpu & (self.link >= 0)
        launches = np.flatnonzero(is_launch)
        launches = launches[t.stream[self.link[launches]] >= 0]
        kernels = self.link[launches]
        self.launches = launches[np.argsort(self.ts[launches], kind="stable")]
        self.launch_stream = t.stream[self.link[self.launches]]
        self.q_launch: dict[int, int] = {}
        self.q_start: dict[int, int] = {}
        ev = np.concatenate([launches, kernels])
        st = np.concatenate([t.stream[kernels], t.stream[kernels]])
        step = np.concatenate([np.ones(len(launches), np.int64), -np.ones(len(kernels), np.int64)])
        o = np.lexsort((-step, self.ts[ev], st))
        ev, st, step = ev[o], st[o], step[o]
        q = np.cumsum(step)
        first = np.r_[True, st[1:] != st[:-1]]
        base = np.maximum.accumulate(np.where(first, np.arange(len(q)), 0))
        q = q - (q[base] - step[base])
        for e, s, v in zip(ev.tolist(), step.tolist(), q.tolist()):
            if s > 0:
                self.q_launch[int(self.link[e])] = v
            else:
                self.q_start[e] = v

    def _records(self) -> None:
        """cudaEventRecord's correlation -> the device op launched last on the recorded stream before it."""
        t = self.t
        rec_stream: dict[int, int] = {}
        for i, a in t.comm_args.items():
            if "wait_on_cuda_event_record_corr_id" in a:
                rec_stream.setdefault(a["wait_on_cuda_event_record_corr_id"], a["wait_on_stream"])
        self.record_src: dict[int, int] = {}
        recs = np.flatnonzero(_ids(t, {"cudaEventRecord"})[t.name] & (t.corr >= 0))
        per_stream: dict[int, np.ndarray] = {}
        for r in recs.tolist():
            s = rec_stream.get(int(t.corr[r]))
            if s is None:
                continue
            if s not in per_stream:
                per_stream[s] = self.launches[self.launch_stream == s]
            ls = per_stream[s]
            k = int(np.searchsorted(self.ts[ls], self.ts[r], side="right")) - 1
            if k >= 0:
                self.record_src[int(t.corr[r])] = int(self.link[ls[k]])

    def _stream_waits(self) -> None:
        """cudaStreamWaitEvent call -> the first device op its thread launched on the waiting stream after it."""
        t = self.t
        self.wait_dest: dict[int, int] = {}
        calls = np.flatnonzero(_ids(t, {"cudaStreamWaitEvent"})[t.name] & (self.link >= 0))
        for c in calls.tolist():
            s = int(t.stream[self.link[c]])
            ls = self.launches[(self.launch_stream == s) & (t.thread[self.launches] == t.thread[c])]
            k = int(np.searchsorted(self.ts[ls], self.ts[c], side="left"))
            if k < len(ls):
                self.wait_dest[c] = int(self.link[ls[k]])

    def window(self, start: int, end: int) -> tuple[np.ndarray, int]:
        """HTA's critical path over [start, end]: ns per category (CAT_NAMES order) and the path's node count."""
        return _Window(self, start, end).path()


class _Window:
    def __init__(self, h: HtaRank, start: int, end: int):
        t = self.t = h.t
        self.h = h
        cpu = ~h.gpu | ((t.stream < 0) & h.sync_cat)  # HTA's stream == -1 (an Event Sync marker among them)
        ts, dur = h.ts, h.dur
        in_win = (ts >= start) & (ts <= end)
        host = cpu & in_win & (dur > 0)
        lk = np.maximum(h.link, 0)
        # a launch links back to one device op only (its last: a cudaGraphLaunch's other ops are not HTA's)
        dev = (t.stream >= 0) & (h.link >= 0) & (h.link[lk] == np.arange(len(t)))
        dev &= (ts[lk] >= start) & (ts[lk] <= end) & (dur[lk] > 0)
        dev |= _ids(t, {"Stream Wait Event"})[t.name] & (t.stream >= 0)
        clipped = host | dev
        self.host_all = np.flatnonzero(host)
        node = clipped & (t.cat_mask(*NODE_CATS) | ((t.stream >= 0) & (h.link >= 0)))
        self.ev = np.flatnonzero(node)
        self.pos = {e: k for k, e in enumerate(self.ev.tolist())}
        self.begin, self.end = ts[self.ev], ts[self.ev] + dur[self.ev]
        self.gk = np.flatnonzero(clipped & (h.link >= 0) & ((t.stream >= 0) | _ids(t, {"Event Sync", "Context Sync"})[t.name]))
        self.edges: list[tuple[int, int, int, int]] = []  # (src node, dst node, weight, category)

    def time(self, node: int) -> int:
        k = node >> 1
        return int(self.end[k] if node & 1 else self.begin[k])

    def add(self, u: int, v: int, cat: int, zero: bool = False) -> None:
        w = 0 if zero or cat == NONE else max(self.time(v) - self.time(u), 0)
        self.edges.append((u, v, w, cat))

    def nodes_of(self, e: int) -> tuple[int, int] | None:
        k = self.pos.get(e)
        return None if k is None else (2 * k, 2 * k + 1)

    def _threads(self) -> None:
        """HTA's call stacks (hta/common/call_stack.py), one per thread, over every host event of the window (any
        category): begins and ends in time order (ends first; of two begins the longer, of two ends the shorter),
        a begin a child of the stack's top, an end popping the top (whichever it is: improperly nested events
        nest as HTA reads them). Then HTA's depth-first walk links the nodes among them."""
        t, hs = self.t, self.host_all
        if not len(hs):
            return
        b, d = self.h.ts[hs], self.h.dur[hs]
        n = len(hs)
        pos = np.arange(n)
        typ = np.r_[np.ones(n, np.int8), np.zeros(n, np.int8)]  # 1 begin, 0 end (ends first at one instant)
        k2 = np.r_[-d, d]  # begins: longer first; ends: shorter first
        k3 = np.r_[pos, -pos]
        th = np.r_[t.thread[hs], t.thread[hs]]
        o = np.lexsort((k3, k2, typ, np.r_[b, b + d], th))
        children: dict[int, list[int]] = defaultdict(list)
        roots: dict[int, list[int]] = defaultdict(list)
        stack: list[int] = []
        cur = -1
        for j, th_j in zip(o.tolist(), th[o].tolist()):
            if th_j != cur:
                stack, cur = [], th_j
            if j < n:
                (children[stack[-1]] if stack else roots[th_j]).append(j)
                stack.append(j)
            elif stack:
                stack.pop()
        blocking = _ids(t, BLOCKING)[t.name[hs]]
        node_of = [self.pos.get(e, -1) for e in hs.tolist()]
        for top in roots.values():
            self._dfs(top, children, node_of, blocking)

    def _dfs(self, top: list[int], children: dict, node_of: list[int], blocking: np.ndarray) -> None:
        last = last_high = None
        depth = 0
        todo: list[tuple[int, bool]] = [(j, True) for j in reversed(top)]
        while todo:
            j, enter = todo.pop()
            k = node_of[j]
            if enter:
                todo.append((j, False))
                todo.extend((c, True) for c in reversed(children.get(j, ())))
                if k < 0:
                    continue
                if depth == 0 and last_high is not None:
                    self.add(last_high, 2 * k, NONE)
                depth += 1
                if last is not None:
                    self.add(last, 2 * k, CPU)
                last = 2 * k
            elif k >= 0:
                depth -= 1
                if last is not None:
                    self.add(last, 2 * k + 1, CPU, zero=bool(blocking[j]))
                if depth == 0:
                    last, last_high = None, 2 * k + 1
                else:
                    last = 2 * k + 1

    def _device(self) -> None:
        t, h = self.t, self.h
        gk = self.gk
        key = np.where(h.sync_cat[gk], h.ts[gk] + h.dur[gk], h.ts[gk])
        gk = gk[np.argsort(key, kind="stable")]
        last: dict[int, int] = {}  # stream -> end node of its last op
        kernel_sync: dict[int, int] = {}  # device op -> the op it waits on (Stream Wait Event)
        comm = t.name_mask(lambda n: n.startswith("nccl") and "Kernel" in n)
        for e in gk.tolist():
            name, rt = h.names[e], int(h.link[e])
            if h.sync_cat[e]:
                self._sync(e, name, rt, last, kernel_sync)
                continue
            nd = self.nodes_of(e)
            if nd is None:
                continue
            b, en = nd
            self.add(b, en, COMM if comm[e] else COMPUTE)
            src = kernel_sync.pop(e, None)
            src_end = None
            if src is not None and (sn := self.nodes_of(src)) is not None:
                src_end = sn[1]
                self.add(src_end, b, NONE)
            s = int(t.stream[e])
            rts = int(h.ts[rt])
            if (h.q_launch.get(e) == 1 and h.q_start.get(e) == 0
                    and (s not in last or self.time(last[s]) < rts)
                    and (src_end is None or self.time(src_end) < rts)
                    and (rn := self.nodes_of(rt)) is not None):
                self.add(rn[0], b, LAUNCH)
            elif s in last and (src_end is None or self.time(src_end) < self.time(last[s])):
                self.add(last[s], b, KK)
            last[s] = en

    def _sync(self, e: int, name: str, rt: int, last: dict, kernel_sync: dict) -> None:
        t, h = self.t, self.h
        call = self.nodes_of(rt)
        if name in ("Stream Wait Event", "Event Sync"):
            rec = t.comm_args.get(e, {}).get("wait_on_cuda_event_record_corr_id")
            src = h.record_src.get(rec) if rec is not None else None
            if src is None:
                return
            if name == "Stream Wait Event":
                dest = h.wait_dest.get(rt)
                if dest is not None:
                    kernel_sync[dest] = src
            elif (sn := self.nodes_of(src)) is not None and call is not None:
                self.add(sn[1], call[1], NONE)
            return
        if call is None:
            return
        ends = list(last.values()) if name == "Context Sync" else [last[s]] if (s := int(t.stream[e])) in last else []
        for u in ends:
            self.add(u, call[1], NONE)

    def path(self) -> tuple[np.ndarray, int]:
        self._threads()
        self._device()
        return longest(2 * len(self.ev), self.edges)


def longest(n: int, edges: list[tuple[int, int, int, int]], nodes: list | None = None) -> tuple[np.ndarray, int]:
    """The longest weighted path of a DAG (networkx.dag_longest_path's rule: a node's distance is the best of its
    in-edges, first in insertion order on ties, never below 0); its weight per category and its node count."""
    preds: dict[int, list[int]] = defaultdict(list)
    succ: dict[int, list[int]] = defaultdict(list)
    indeg = [0] * n
    for i, (u, v, _, _) in enumerate(edges):
        preds[v].append(i)
        succ[u].append(v)
        indeg[v] += 1
    order = [v for v in range(n) if indeg[v] == 0]
    for v in order:  # Kahn: `order` grows while it is read
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                order.append(w)
    dist = [0] * n
    via = [-1] * n
    for v in order:
        for i in preds[v]:
            u, _, w, _ = edges[i]
            if dist[u] + w > dist[v] or (via[v] < 0 and dist[u] + w >= dist[v]):
                dist[v], via[v] = dist[u] + w, i
    out = np.zeros(len(CAT_NAMES), np.int64)
    if not order:
        return out, 0
    v = max(order, key=dist.__getitem__)
    count = 1
    if nodes is not None:
        nodes.append(v)
    while via[v] >= 0:
        u, _, w, cat = edges[via[v]]
        if cat != NONE:
            out[cat] += w
        v, count = u, count + 1
        if nodes is not None:
            nodes.append(v)
    return out, count
