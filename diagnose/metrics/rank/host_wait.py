"""Host time spent waiting for the device: inside `*Synchronize` calls and synchronous (non-Async) copies.

A loop whose host never waits for its device is bound by the host: the device finishes its queue and idles
until the next launch, so faster kernels only lengthen that idle. The host's waits per step are then the most a
faster device can take off the step (rules/precision.py reads them as the bound of the fp32 GEMM gain where the
device idles). Launch calls that block on a full queue are not counted: on a saturated device (little idle) the
rules do not use this bound.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.metrics.rank.classify import prefiltered

# the calls in which the host waits for its device: what the critical path's sync edges (critical_path/graph.py)
# and the host's waits per step both read
SYNC_CALL_RE = re.compile(r"^(cuda|hip|cu)\w*Synchronize$|^(cuda|hip|cu)Memcpy(?!\w*Async)\w*$")
is_sync_call = prefiltered(SYNC_CALL_RE, "ynchronize", "emcpy")


def host_wait_ms(t: RankTrace, wins: list[Window]) -> float | None:
    """Mean ms per step the host spends in device-wait calls (None without steps or runtime events). Runtime calls
    do not nest in each other, so their durations add up without double counting."""
    if not wins or t.kind is None:
        return None
    calls = in_windows(t, t.name_mask(is_sync_call, t.kind == RUNTIME), wins)
    return float(np.sum(t.dur[calls])) / NS_PER_MS / len(wins)
