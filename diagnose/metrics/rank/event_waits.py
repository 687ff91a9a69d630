"""What a blocking call's idle waited on, when the device op it needed was queued behind a stream-event wait.

A synchronous copy or a synchronize holds the host until its device work is done. When that work sits on a
stream behind `cudaStreamWaitEvent` / `hipStreamWaitEvent` / `cuStreamWaitEvent`, the time is the event's:
the device waits for work recorded on another stream, and pinning memory or `non_blocking=True` gives nothing
back. The chain is read from the rank's own events (the edges a dependency graph holds):

  blocking call -> the device op that ended the idle (stream S, started D) -> its launch (L) -> the last
  stream-wait call issued on S's launching thread after S's previous op was launched and before L -> the last
  event-record call before that wait -> the last device op launched before the record on the record's thread,
  on another stream: the recording stream R and what ran there.

Without CUPTI's sync-activity args (`wait_on_stream`, kept by no loader field) the waiting stream is the queued
op's and the recording stream the record's last launch: both are read by launch order, which the evidence says.
A `Stream Wait Event` device record (cuda_sync) of the wait's correlation on another stream vetoes the chain.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, RUNTIME, SYNC, RankTrace
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import EventWait
from llmdiag.diagnose.model.lazy_re import lazy_compile

WAIT_RE = lazy_compile(r"^(cuda|hip|cu)StreamWaitEvent", re.I)
RECORD_RE = lazy_compile(r"^(cuda|hip|cu)EventRecord", re.I)
HELD = 0.5  # the queued op started at least this share of the idle stretch after it could have (its launch)


class EventWaits:
    """Built once per rank; `at(call, gap_start, gap_end)` answers per blocking call (a few per rank)."""

    def __init__(self, t: RankTrace):
        self.t = t
        rt = (t.kind == RUNTIME) & (t.stream < 0)
        self.waits = np.flatnonzero(t.name_mask(WAIT_RE.search, rt))
        self.records = np.flatnonzero(t.name_mask(RECORD_RE.search, rt)) if len(self.waits) else self.waits
        if not len(self.waits):
            return
        self.dev = np.flatnonzero(t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0))
        self.launch = launch_calls(t, self.dev)  # index of each device op's launch call, -1 if unseen
        sync = np.flatnonzero((t.kind == SYNC) & (t.stream >= 0) & (t.corr >= 0))
        self.sync_stream = dict(zip(t.corr[sync].tolist(), t.stream[sync].tolist()))

    def at(self, call: int, gap_start: int, gap_end: int) -> EventWait | None:
        if not len(self.waits):
            return None
        t, dev = self.t, self.dev
        j = int(np.searchsorted(t.ts[dev], gap_end))
        if j >= len(dev) or self.launch[j] < 0:
            return None
        op, s = int(dev[j]), int(t.stream[dev[j]])
        start, lc = int(t.ts[op]), int(self.launch[j])
        if start - max(int(t.ts[lc]), gap_start) < HELD * (gap_end - gap_start):
            return None  # it started soon after it could: not held
        same = np.flatnonzero(t.stream[dev[:j]] == s)
        prev_launch = int(t.ts[self.launch[same[-1]]]) if len(same) and self.launch[same[-1]] >= 0 else -1
        w = self.waits[(t.ts[self.waits] > prev_launch) & (t.ts[self.waits] <= t.ts[lc])
                       & (t.ts[self.waits] <= t.ts[call]) & (t.thread[self.waits] == t.thread[lc])]
        if not len(w):
            return None
        wait = int(w[-1])
        if self.sync_stream.get(int(t.corr[wait]), s) != s:
            return None  # the device record of that wait says it held another stream
        rec = self.records[t.ts[self.records] < t.ts[wait]]
        r_stream, r_op, r_end = -1, "", None
        if len(rec):
            rc = int(rec[-1])
            ok = (self.launch >= 0) & (t.stream[dev] != s)
            ok[ok] = (t.thread[self.launch[ok]] == t.thread[rc]) & (t.ts[self.launch[ok]] < t.ts[rc])
            cand = np.flatnonzero(ok)
            if len(cand):
                k = cand[np.argmax(t.ts[self.launch[cand]])]
                x = int(dev[k])
                r_stream, r_op, r_end = int(t.stream[x]), t.names[t.name[x]][:200], int(t.ts[x] + t.dur[x])
        return EventWait(call=t.names[t.name[wait]][:200], wait_stream=s, queued_op=t.names[t.name[op]][:200],
                         queued_ms=(start - int(t.ts[lc])) / NS_PER_MS, record_stream=r_stream, record_op=r_op,
                         record_done_before_ms=(start - r_end) / NS_PER_MS if r_end is not None else None)
