"""Idle time per device stream (HTA's idle time breakdown is per rank and stream): on each stream, the gaps
between its consecutive device events inside one step, split by whether the host had launched the next event
yet. `host_wait`: the part of a gap before the next event's launch call started (the stream waited on the
host); `other`: the rest (the event was launched and waited on a dependency: another stream, an event, a
sync). Edges (before a stream's first event and after its last in a step) are not idle of the stream.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import RankTrace
from llmdiag.diagnose.metrics.rank.launches import device_events, launch_calls
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.metrics.rank.sets import distinct


def stream_idle(t: RankTrace, wins: list[Window]) -> list[tuple[int, int, int]]:
    """[(stream, idle ns, of which host wait ns)] over the windows, per stream with device events."""
    dev = device_events(t, wins)
    if not len(dev):
        return []
    rt = launch_calls(t, dev)
    starts = np.array([w.start for w in wins], np.int64)
    win = np.searchsorted(starts, t.ts[dev], side="right") - 1
    launch = np.where(rt >= 0, t.ts[np.maximum(rt, 0)], np.iinfo(np.int64).min)
    out = []
    for s in distinct(t.stream[dev]).tolist():
        m = np.flatnonzero(t.stream[dev] == s)
        m = m[np.lexsort((t.ts[dev[m]], win[m]))]  # by window, then start
        ts, end, w, la = t.ts[dev[m]], t.ts[dev[m]] + t.dur[dev[m]], win[m], launch[m]
        if len(m) < 2:
            out.append((int(s), 0, 0))
            continue
        busy_until = np.maximum.accumulate(end)  # within a window: events are sorted by window first
        same = w[1:] == w[:-1]
        prev_end = busy_until[:-1]
        gap = np.where(same, np.maximum(ts[1:] - prev_end, 0), 0)
        host = np.clip(np.minimum(ts[1:], la[1:]) - prev_end, 0, None)
        host = np.where(same, np.minimum(host, gap), 0)
        out.append((int(s), int(gap.sum()), int(host.sum())))
    return out
