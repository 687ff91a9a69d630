"""Device events paired with their launch calls by correlation id, apart from diagnose.metrics.rank.launches (which
reads step windows) so that modules the step windows themselves depend on (idle stretches, event waits) can pair
launches too."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import RUNTIME, RankTrace


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
