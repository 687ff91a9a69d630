"""The rank's exposed communication as intervals: communication with no compute under it, inside the analysis
windows. Its length per step is the step's `exposed_comm_ms` (overlap.py's step_breakdowns measures the same
union window by window); the cross-rank matching reads it to tell which part of a rank's wait for later peers was
exposed (metrics/job/exposed_wait.py)."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.overlap import Timeline
from llmdiag.diagnose.metrics.rank.steps import Window


def exposed_union(tl: Timeline, wins: list[Window]) -> iv.Union:
    """(comm − compute) ∩ the windows, sorted and disjoint, on the rank's own clock (int ns)."""
    exposed = iv.difference(tl.comm, tl.compute)
    if not wins or not len(exposed[0]):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    w = iv.union(np.array([x.start for x in wins], np.int64), np.array([x.end for x in wins], np.int64))
    return iv.difference(exposed, iv.difference(exposed, w))  # A ∩ W = A − (A − W)
