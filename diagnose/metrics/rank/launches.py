"""Device events paired with the runtime call that launched them (cudaLaunchKernel, hipExtLaunchKernel,
cudaMemcpyAsync, ...): the call carrying the same `correlation` id on the host (diagnose.metrics.host_ops
explains the id). One pairing for the op → kernel table, the launch statistics and the roofline."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, RankTrace
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls  # noqa: F401 (re-export)


def device_events(t: RankTrace, wins: list[Window]) -> np.ndarray:
    """Kernels, memcpys and memsets on a device stream starting inside the windows (indices, by start)."""
    return np.flatnonzero(in_windows(t, t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0), wins))


def launch_ts(t: RankTrace, i: int) -> int:
    """Host time of one event: for a device event, the first host event of its correlation id (its launch);
    else, or where the trace lacks the launch, its own start."""
    c = t.corr[i]
    if t.stream[i] >= 0 and c >= 0:
        hit = np.flatnonzero((t.corr == c) & (t.stream < 0))
        if len(hit):
            return int(t.ts[hit[0]])
    return int(t.ts[i])
