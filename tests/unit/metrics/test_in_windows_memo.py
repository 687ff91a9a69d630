"""overlap.in_windows keeps the last windows' membership of every event: the same answer as computing it afresh
(start inside [start, end) of a window) for other masks, other windows and another trace, and the entry goes
with the trace's start column."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np

from llmdiag.diagnose.metrics.rank import overlap
from llmdiag.diagnose.metrics.rank.steps import Window


def _fresh(ts, mask, wins):
    inside = np.zeros(len(ts), bool)
    for w in wins:
        inside |= (ts >= w.start) & (ts < w.end)
    return mask & inside


def test_same_answer_for_masks_windows_and_traces():
    rng = np.random.default_rng(3)
    traces = [SimpleNamespace(ts=np.sort(rng.integers(0, 10_000, 2000)).astype(np.int64)) for _ in range(2)]
    wins_a = [Window(0, 100, 900, 100, 900), Window(1, 900, 2500, 900, 2500), Window(2, 4000, 4001, 4000, 4001)]
    wins_b = [Window(0, 50, 7000, 50, 7000)]
    for t in traces + traces[::-1]:
        for wins in (wins_a, wins_b, wins_a):
            for _ in range(3):
                mask = rng.random(len(t.ts)) < 0.6
                assert np.array_equal(overlap.in_windows(t, mask, wins), _fresh(t.ts, mask, wins))


def test_entry_dropped_with_the_trace():
    t = SimpleNamespace(ts=np.arange(10, dtype=np.int64))
    overlap.in_windows(t, np.ones(10, bool), [Window(0, 2, 5, 2, 5)])
    assert overlap._INSIDE
    del t
    gc.collect()
    assert not overlap._INSIDE
