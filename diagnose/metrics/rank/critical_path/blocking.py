"""SYNC edges: a host thread blocked in a call until a device op ended (graph.py adds them).

Three kinds of call block: a synchronize (device / stream / event synchronize, a synchronous memcpy; host_wait's
is_sync_call) and a free that synchronizes the device (`cudaFree` / `hipFree`, host_wait's is_free_sync: with the
caching allocator off every free drains the device, mi300_resnet18_no_caching_allocator), each waiting on the
device op that ended last inside it (a free on an idle device finds none and draws no edge); and an async
copy (cudaMemcpyAsync / hipMemcpyAsync) whose own copy ended before it returned (pageable memory: it held the
host).

What such a call waited on was enqueued before it began (resume.latest_launched_end: a device clock running
behind the host's puts ops launched after the call inside it). The edge goes into the thread's first point at
or after that op's end inside the call: the call's own end, or, where the trace nests the call improperly (its
parent op ending a µs or two before it, a rounding of the profiler's: torchrec sst_long_a2a_optimizer_5 rank 3,
`aten::copy_` ending 2 µs before the 39 ms `cudaStreamSynchronize` inside it), the parent's end, which came
first; else that point's only dependency was the call's begin, and the thread's whole wait read as host time.
"""

from __future__ import annotations


import numpy as np

from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank.critical_path.resume import latest_launched_end
from llmdiag.diagnose.metrics.rank.host_wait import is_async_copy, is_free_sync, is_sync_call

WAKE_LOOKAHEAD = 4  # thread points checked after a call's begin for the first one past the op it waited on


def sync_edges(t: RankTrace, ev: np.ndarray, hk: np.ndarray, dk: np.ndarray, begin: np.ndarray, end: np.ndarray,
               launched: np.ndarray, nodes: np.ndarray, th: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device end node, host node, is a free) per blocking call that waited on a device op: a free's time
    after the device drained is the allocator's own work, not a wait (graph.py names its edge so). `ev`,
    `begin`, `end`: the graph's selected events; `hk` / `dk` their host / device positions; `launched`: per
    device event (dk order), its launch's begin (int64 min unknown); `nodes`, `th`: the host nodes in thread
    order and their thread (host_order.host_points)."""
    nm = t.name[ev[hk]]
    sync = np.zeros(len(t.names), bool)
    sync[t.name_ids(is_sync_call)] = True
    free = np.zeros(len(t.names), bool)
    free[t.name_ids(is_free_sync)] = True  # a free waits for the device's queued work (host_wait.free_wait_ns)
    calls = hk[(sync | free)[nm]]
    o = np.argsort(end[dk], kind="stable")
    j = latest_launched_end(end[dk][o], launched[o], end[calls], begin[calls], begin[calls])
    ok = j >= 0
    src, call = [dk[o[j[ok]]]], [calls[ok]]
    acopy = np.zeros(len(t.names), bool)
    acopy[t.name_ids(is_async_copy)] = True
    ac = hk[acopy[nm] & (t.corr[ev[hk]] >= 0)]
    if len(ac):  # an async copy whose own copy ended before it returned: it held the host
        dc = t.corr[ev[dk]]
        o = np.argsort(dc, kind="stable")
        i = np.minimum(np.searchsorted(dc[o], t.corr[ev[ac]]), len(o) - 1)
        d = dk[o[i]]
        ok = (dc[o[i]] == t.corr[ev[ac]]) & (end[d] <= end[ac]) & (end[d] > begin[ac])
        src.append(d[ok])
        call.append(ac[ok])
    s, c = np.concatenate(src), np.concatenate(call)
    return 2 * s + 1, _wake_point(c, end[s], begin, end, nodes, th), free[t.name[ev[c]]]


def _wake_point(calls: np.ndarray, dev_end: np.ndarray, begin: np.ndarray, end: np.ndarray, nodes: np.ndarray,
                th: np.ndarray) -> np.ndarray:
    """Per call, its thread's first point after its begin, at or after `dev_end` and not after its end, among
    the WAKE_LOOKAHEAD next points; the call's end node where none is."""
    out = 2 * calls + 1
    if not len(calls):
        return out
    pos = np.empty(int(nodes.max()) + 1, np.int64)
    pos[nodes] = np.arange(len(nodes))
    p = pos[2 * calls]
    found = np.zeros(len(calls), bool)
    time = np.where(nodes % 2 == 1, end[nodes // 2], begin[nodes // 2])
    for k in range(1, WAKE_LOOKAHEAD + 1):
        q = np.minimum(p + k, len(nodes) - 1)
        ok = ~found & (p + k < len(nodes)) & (th[q] == th[p]) & (time[q] <= end[calls]) & (time[q] >= dev_end)
        out[ok] = nodes[q[ok]]
        found |= ok
    return out
