"""Device events paired with the runtime call that launched them (cudaLaunchKernel, hipExtLaunchKernel,
cudaMemcpyAsync, ...): the call carrying the same `correlation` id on the host (diagnose.metrics.host_ops
explains the id). One pairing for the op → kernel table, the launch statistics and the roofline."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window


def device_events(t: RankTrace, wins: list[Window]) -> np.ndarray:
    """Kernels, memcpys and memsets on a device stream starting inside the windows (indices, by start)."""
    return np.flatnonzero(in_windows(t, t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0), wins))


def launch_calls(t: RankTrace, dev: np.ndarray) -> np.ndarray:
    """For each device event of `dev`, the index of its launch call (the first host runtime call of its
    correlation id), -1 where none is seen (no correlation, or the call outside the trace)."""
    out = np.full(len(dev), -1, np.int64)
    rt = np.flatnonzero((t.kind == RUNTIME) & (t.corr >= 0) & (t.stream < 0))
    has = t.corr[dev] >= 0
    if not len(rt) or not has.any():
        return out
    order = rt[np.argsort(t.corr[rt], kind="stable")]
    keys = t.corr[order]
    c = t.corr[dev]
    pos = np.minimum(np.searchsorted(keys, c), len(keys) - 1)
    hit = has & (keys[pos] == c)
    out[hit] = order[pos[hit]]
    return out


def launch_ts(t: RankTrace, i: int) -> int:
    """Host time of one event: for a device event, the first host event of its correlation id (its launch);
    else, or where the trace lacks the launch, its own start."""
    c = t.corr[i]
    if t.stream[i] >= 0 and c >= 0:
        hit = np.flatnonzero((t.corr == c) & (t.stream < 0))
        if len(hit):
            return int(t.ts[hit[0]])
    return int(t.ts[i])
