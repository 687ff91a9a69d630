"""Host time spent waiting for the device: inside `*Synchronize` calls and synchronous (non-Async) copies, and
inside `*MemcpyAsync` calls that held the host until their own copy ended (a copy to or from pageable host
memory is synchronous whatever the call's name) for as long as the device ran other queued work before that copy,
and inside `cudaFree` / `hipFree` / `cuMemFree` calls while the device ran: a free synchronizes the device (it
returns only once the device's queued work is done; mi300_resnet18_no_caching_allocator: no `hipFree` ends while
the device is busy, ~42 ms per iteration of waits that read as 0.03 ms).

A loop whose host never waits for its device is bound by the host: the device finishes its queue and idles
until the next launch, so faster kernels only lengthen that idle. The host's waits per step are then the most a
faster device can take off the step (rules/precision.py reads them as the bound of the fp32 GEMM gain where the
device idles). Of a held async copy only the device-busy time before its copy counts: that is the host waiting
for queued kernels, which faster kernels shorten; the copy itself, and any time the device idled while the host
staged the data, a faster device does not. Launch calls that block on a full queue are not counted: on a
saturated device (little idle) the rules do not use this bound.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, MEMCPY, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.metrics.rank.classify import prefiltered

# the calls in which the host waits for its device: what the critical path's sync edges (critical_path/graph.py)
# and the host's waits per step both read
SYNC_CALL_RE = re.compile(r"^(cuda|hip|cu)\w*Synchronize$|^(cuda|hip|cu)Memcpy(?!\w*Async)\w*$")
is_sync_call = prefiltered(SYNC_CALL_RE, "ynchronize", "emcpy")
# async-named copies: one may still hold the host (pageable memory); what the host's waits here, the critical
# path's sync edges (critical_path/blocking.py) and graph replays (graph_replay.py) read
ASYNC_COPY_RE = re.compile(r"^(cuda|hip|cu)Memcpy\w*Async\w*$")
is_async_copy = prefiltered(ASYNC_COPY_RE, "emcpy")
# frees that synchronize the device (the stream-ordered `*FreeAsync` does not)
_FREE_RE = re.compile(r"^(cuda|hip)Free$|^cuMemFree(_v2)?$")
is_free_sync = prefiltered(_FREE_RE, "Free")


def host_wait_ms(t: RankTrace, wins: list[Window]) -> float | None:
    """Mean ms per step the host spends waiting for its device (None without steps or runtime events): the
    device-wait calls' whole length, plus `held_copy_wait_ns`. Runtime calls do not nest in each other, so their
    durations add up without double counting."""
    if not wins or t.kind is None:
        return None
    calls = in_windows(t, t.name_mask(is_sync_call, t.kind == RUNTIME), wins)
    return (float(np.sum(t.dur[calls])) + held_copy_wait_ns(t, wins) + free_wait_ns(t, wins)) / NS_PER_MS / len(wins)


def _device_busy(t: RankTrace):
    dev = (t.stream >= 0) & (t.kind != ANNOTATION)
    return iv.union(t.ts[dev], t.ts[dev] + t.dur[dev])


def free_wait_ns(t: RankTrace, wins: list[Window]) -> int:
    """ns in the windows the host waited for the device inside device-synchronizing free calls: each call's
    length while some device op (any stream) ran; a free on an idle device waits for nothing."""
    if t.kind is None:
        return 0
    ci = np.flatnonzero(in_windows(t, t.name_mask(is_free_sync, t.kind == RUNTIME), wins))
    if not len(ci):
        return 0
    return int(iv.overlap_each(t.ts[ci], t.ts[ci] + t.dur[ci], _device_busy(t)).sum())


def held_copy_wait_ns(t: RankTrace, wins: list[Window]) -> int:
    """ns in the windows the host waited for queued device work inside async-named copy calls that held it: a
    call whose own copy (same correlation id) began while the call still ran (its end may be recorded a little
    after the call returns: a pageable copy's last chunk); counted from the call's start to that copy's start,
    only while some device op (any stream) ran. A call that did not hold the host returns before a queued copy
    begins, and a copy that begins inside a short call had nothing queued before it: neither counts."""
    if t.kind is None:
        return 0
    ci = np.flatnonzero(in_windows(t, t.name_mask(is_async_copy, (t.kind == RUNTIME) & (t.corr >= 0)), wins))
    di = np.flatnonzero((t.kind == MEMCPY) & (t.stream >= 0) & (t.corr >= 0))
    if not len(ci) or not len(di):
        return 0
    di = di[np.argsort(t.corr[di], kind="stable")]
    j = np.minimum(np.searchsorted(t.corr[di], t.corr[ci]), len(di) - 1)
    d = di[j]
    c_end = t.ts[ci] + t.dur[ci]
    held = (t.corr[d] == t.corr[ci]) & (t.ts[d] > t.ts[ci]) & (t.ts[d] < c_end)
    if not held.any():
        return 0
    ci, d = ci[held], d[held]
    return int(iv.overlap_each(t.ts[ci], t.ts[d], _device_busy(t)).sum())
