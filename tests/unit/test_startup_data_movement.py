"""data_movement's parent look-up (issue 37: ~13 ms of nccl_data's run went to masks over ~2,000 events per op)
now slices the op's thread's host ops. It must name the same parent as the plain definition: the innermost
`cpu_op` of the same thread (event index within PARENT_SCAN*8 before to 8 after), starting no later and ending no
earlier, under another name; the latest start, then the shortest, then the first in event order."""

from __future__ import annotations

import os

import numpy as np
import pytest

from llmdiag.diagnose.io.loader import load_trace
from llmdiag.diagnose.io.trace import CPU_OP
from llmdiag.diagnose.metrics.rank.classify import classify
from llmdiag.diagnose.metrics.rank.data_movement import PARENT_SCAN, _HostOps, _parent
from tests.conftest import REAL


def _plain(t, o: int) -> int:
    """The definition, event by event in plain Python."""
    best = None
    for c in range(max(0, o - PARENT_SCAN * 8), min(len(t.ts), o + 8)):
        if (c == o or t.kind[c] != CPU_OP or t.stream[c] >= 0 or t.thread[c] != t.thread[o]
                or t.name[c] == t.name[o]):
            continue
        if t.ts[c] <= t.ts[o] and t.ts[c] + t.dur[c] >= t.ts[o] + t.dur[o]:
            key = (-int(t.ts[c]), int(t.dur[c]))
            if best is None or key < best[0]:
                best = (key, int(t.name[c]))
    return -1 if best is None else best[1]


@pytest.mark.real("hta/nccl_data.json.gz")
def test_parents_match_the_plain_definition_on_a_real_trace():
    t = load_trace(os.path.join(REAL, "hta", "nccl_data.json.gz"))
    classify(t)
    host = _HostOps(t)
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
    sample = ops[:: max(1, len(ops) // 400)].tolist()
    got = [_parent(t, o, host) for o in sample]
    assert got == [_plain(t, o) for o in sample]
    assert sum(g >= 0 for g in got) > len(got) // 2  # most host ops have an enclosing op: the test sees parents
