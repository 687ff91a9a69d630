"""The device's idle inside CUDA/HIP graph replays of one rank (model/graph_replay.py), from its own events.

A replay's recorded nodes are the device ops whose correlation id is its graph launch call's (`cudaGraphLaunch`,
`hipGraphLaunch`). It can start once its launch call began and its stream's previous op (in the stream's order,
before its first recorded node) ended: `ready`; it runs to its last recorded node's end. Inside the union of those
spans, the stretches of at least GAP_NS with no device op on any stream are idle the replay holds: work was queued
(the replay itself), the device ran nothing that the trace shows. A graph's event-wait and host-function nodes are
not recorded by the profiler, and kernel nodes may go unrecorded under graph replay, so what the device waited on
(or whether it truly idled) is not in the trace: the rule says so. Gaps shorter than GAP_NS (a graph's own node
scheduling, µs) are not counted. Linear in events but for a sort.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.host_wait import is_async_copy, is_sync_call
from llmdiag.diagnose.metrics.rank.sets import member
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.graph_replay import GraphReplays

GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
GAP_NS = 1_000_000  # an idle stretch this long inside a replay is a wait the trace does not show (sim_graph's floor)
RECORD_IDLE_MS = 1.0  # below this much such idle per step, no record (nothing a rule reports)
NEVER = np.iinfo(np.int64).min


def _groups(t: RankTrace, calls: np.ndarray, dev_mask: np.ndarray):
    """Per replay with a recorded node: (its launch call, its first node, its last node's end, node count, node ns)."""
    dev = np.flatnonzero(dev_mask & (t.corr >= 0))
    nodes = dev[member(t.corr[dev], t.corr[calls])]
    if not len(nodes):
        return None
    nodes = nodes[np.lexsort((t.ts[nodes], t.corr[nodes]))]
    c = t.corr[nodes]
    at = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    ends = np.maximum.reduceat(t.ts[nodes] + t.dur[nodes], at)
    cs = calls[np.argsort(t.corr[calls], kind="stable")]
    launch = cs[np.minimum(np.searchsorted(t.corr[cs], c[at]), len(cs) - 1)]
    return launch, nodes[at], ends, np.diff(np.r_[at, len(nodes)]), np.add.reduceat(t.dur[nodes], at)


def _ready(t: RankTrace, dev_mask: np.ndarray, launch: np.ndarray, first: np.ndarray) -> np.ndarray:
    """When each replay could start: its launch call's start or its stream's previous op's end, the later (never
    after its first recorded node)."""
    d = np.flatnonzero(dev_mask)
    so = d[np.lexsort((t.ts[d], t.stream[d]))]
    pos = np.zeros(len(t), np.int64)
    pos[so] = np.arange(len(so))
    p = np.maximum(pos[first] - 1, 0)
    prev = so[p]
    has = (pos[first] > 0) & (t.stream[prev] == t.stream[first])
    pred_end = np.where(has, t.ts[prev] + t.dur[prev], NEVER)
    return np.minimum(np.maximum(t.ts[launch], pred_end), t.ts[first])


def _under(t: RankTrace, call: int) -> str:
    """The innermost host op on the call's thread that encloses it."""
    m = (t.kind == CPU_OP) & (t.thread == t.thread[call]) & (t.ts <= t.ts[call]) & (t.ts + t.dur >= t.ts[call])
    i = np.flatnonzero(m)
    return t.names[int(t.name[i[np.argmax(t.ts[i])]])][:120] if len(i) else ""


def _around(t: RankTrace, call: int, kind: int, skip: str = "") -> str:
    """The outermost event of `kind` on the call's thread that encloses it (names starting with `skip` aside)."""
    m = (t.kind == kind) & (t.thread == t.thread[call]) & (t.ts <= t.ts[call]) & (t.ts + t.dur >= t.ts[call] + t.dur[call])
    i = [j for j in np.flatnonzero(m).tolist() if not (skip and t.names[int(t.name[j])].startswith(skip))]
    return t.names[int(t.name[min(i, key=lambda j: t.ts[j])])][:120] if i else ""


def _held(t: RankTrace, g: GraphReplays, s: int, e: int) -> None:
    """The longest host call waiting for the device (a synchronize, or an async-named copy) spanning [s, e]."""
    m = t.name_mask(lambda x: bool(is_sync_call(x) or is_async_copy(x)), (t.stream < 0) & (t.kind == RUNTIME))
    i = np.flatnonzero(m & (t.ts <= s) & (t.ts + t.dur >= e))
    if not len(i):
        return
    c = int(i[np.argmax(t.dur[i])])
    g.held_call = t.names[int(t.name[c])][:60]
    g.held_ms = float(t.dur[c]) / NS_PER_MS
    g.held_op = _around(t, c, CPU_OP)
    g.held_region = _around(t, c, ANNOTATION, skip="ProfilerStep#")


def graph_replays(t: RankTrace, wins: list[Window]) -> GraphReplays | None:
    if not wins or not t.is_gpu or t.kind is None:
        return None
    calls = np.flatnonzero(t.name_mask(lambda s: bool(GRAPH_LAUNCH.match(s)),
                                       (t.stream < 0) & (t.kind == RUNTIME) & (t.corr >= 0)))
    if not len(calls):
        return None
    dev_mask = (t.stream >= 0) & (t.kind != ANNOTATION)
    got = _groups(t, calls, dev_mask)
    if got is None:
        return None
    launch, first, ends, counts, node_ns = got
    ready = _ready(t, dev_mask, launch, first)
    busy = iv.union(t.ts[dev_mask], t.ts[dev_mask] + t.dur[dev_mask])
    ws = np.array([w.start for w in wins], np.int64)
    we = np.array([w.end for w in wins], np.int64)
    wu = iv.union(ws, we)
    spans = iv.union(ready, ends)
    s, e = iv.difference(spans, busy)
    keep = (e - s) >= GAP_NS  # the whole stretch's length decides; then only its part inside the windows counts
    long_ = (s[keep], e[keep])
    s, e = iv.difference(long_, iv.difference(long_, wu))
    n = len(wins)
    idle_ns = int((e - s).sum())
    if idle_ns / NS_PER_MS / n < RECORD_IDLE_MS:
        return None
    in_win = iv.overlap_each(ready, ends, wu) > 0  # replays that run in the windows
    pre = iv.union(ready, t.ts[first])
    g = GraphReplays(launches=float(in_win.sum()) / n, nodes=float(counts[in_win].sum()) / n,
                     node_ms=float(node_ns[in_win].sum()) / NS_PER_MS / n,
                     span_ms=iv.intersect_total(spans, wu) / NS_PER_MS / n, idle_ms=idle_ns / NS_PER_MS / n,
                     before_first_ms=float(iv.overlap_each(s, e, pre).sum()) / NS_PER_MS / n, stretches=len(s) / n,
                     launch_call=Counter(t.names[int(i)] for i in t.name[launch]).most_common(1)[0][0][:60])
    j = int(np.argmax(e - s))
    holds = np.flatnonzero((ready <= s[j]) & (ends >= e[j]))
    if len(holds):  # the replay holding it: the one whose first recorded node follows it soonest, else the first
        lead = t.ts[first[holds]] - e[j]
        k = int(holds[np.argmin(np.where(lead >= 0, lead, np.iinfo(np.int64).max))])
        g.longest_before_first = bool(t.ts[first[k]] >= e[j])
        g.longest_launch_lead_ms = float(t.ts[first[k]] - t.ts[launch[k]]) / NS_PER_MS
        g.longest_op = _under(t, int(launch[k]))
        g.longest_stream = int(t.stream[first[k]])
        g.longest_nodes = int(counts[k])
        g.longest_node_ms = float(node_ns[k]) / NS_PER_MS
        g.longest_span_ms = float(ends[k] - ready[k]) / NS_PER_MS
    _held(t, g, int(s[j]), int(e[j]))
    g.longest_ms = float(e[j] - s[j]) / NS_PER_MS
    g.longest_step = wins[max(int(np.searchsorted(ws, s[j], side="right")) - 1, 0)].step
    return g
