"""Device idle that waits for the host to launch the next work, gap by gap (what "launch overhead" can claim).

A device idle gap (metrics/rank/idle.py's, capture edges left out) is a launch wait when the device event that ends
it was launched at or after the gap began: the device had nothing queued and waited for the host to issue it.
Only short gaps (under SHORT_GAP_NS) count: many of them are the per-op cost eager mode pays between short kernels
(Python, the dispatcher, the launch call); one long gap is one host op's or call's (idle_stretch.py names those).
Of each counted gap, only the idle idle.py gives to host ops or to no host event (causes host_bound /
unattributed) counts: a blocking call's, the DataLoader's or a communication wait's idle is theirs. Of that idle,
the part inside the launch calls themselves (the runtime call that issued any device event: cudaLaunchKernel,
cudaMemsetAsync, ...) is what CUDA graphs save per launch; the rest is the host's op work between launches.
Long waited gaps are reported apart (`long_ms`; `long_ops_ms`: the part while host ops run, not a host with no op
recorded, which is a stall's). Every number is per step, mean over the windows; linear in events (one sort, one search per gap).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import LaunchWait

SHORT_GAP_NS = 1_000_000  # a gap of 1 ms or more is one host event's (a stretch), not per-launch overhead
HOST_CAUSES = ("host_bound", "unattributed")  # idle.py's causes a host that issues work late leaves


def launch_wait(t: RankTrace, steps) -> LaunchWait | None:
    """`steps`: idle.py's StepIdle list. None where no device event has a recorded launch."""
    di = np.flatnonzero(t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0))
    if not len(di) or not steps:
        return None
    rt = launch_calls(t, di)
    if not (rt >= 0).any():
        return None
    o = np.argsort(t.ts[di], kind="stable")
    dts, drt = t.ts[di][o], rt[o]
    calls = rt[rt >= 0]
    in_call = iv.union(t.ts[calls], t.ts[calls] + t.dur[calls])
    wait = inside = gaps = long_ms = long_ops = 0
    for st in steps:
        edge = [p[2] for p in st.parts if p[0] == "edge"]
        gs, ge = iv.difference(st.idle, iv.union_of(*edge)) if edge else st.idle
        if not len(gs):
            continue
        j = np.minimum(np.searchsorted(dts, ge), len(dts) - 1)  # the device event ending each gap
        c = drt[j]
        waited = (dts[j] == ge) & (c >= 0)
        waited[waited] = t.ts[c[waited]] >= gs[waited]  # its launch call began inside the gap
        host = [p[2] for p in st.parts if p[0] in HOST_CAUSES]
        hu = iv.union_of(*host) if host else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        short = waited & (ge - gs < SHORT_GAP_NS)
        ws, we = gs[short], ge[short]
        idle_host = iv.overlap_each(ws, we, hu)
        wait += int(idle_host.sum())
        gaps += int((idle_host > 0).sum())
        # host-cause idle of the short waited gaps that falls inside a launch call
        inside += iv.intersect_total(iv.difference(iv.union(ws, we), iv.difference(iv.union(ws, we), hu)), in_call)
        lw = waited & ~short
        long_ms += int(iv.overlap_each(gs[lw], ge[lw], hu).sum())
        ops = [p[2] for p in st.parts if p[0] == "host_bound"]
        if ops:
            long_ops += int(iv.overlap_each(gs[lw], ge[lw], iv.union_of(*ops)).sum())
    n = len(steps)
    return LaunchWait(wait_ms=round(wait / n / NS_PER_MS, 6), in_launch_ms=round(inside / n / NS_PER_MS, 6),
                      gaps=round(gaps / n, 3), long_ms=round(long_ms / n / NS_PER_MS, 6),
                      long_ops_ms=round(long_ops / n / NS_PER_MS, 6))
