"""Which ranks "start capturing late" (skew.capture_windows), on collectives generated as columns.

Issue 36: on the project's own CPU runs every rank captures the same steps (one profiler schedule), yet a tp4pp2
run printed "rank 6's capture starts 1 collective / 14.37 ms after the others'": gloo's host spans end when the
rank's thread is scheduled again, up to a few ms apart on an oversubscribed host, so some rows find no partner
by completion time. A rank that recorded a collective of the group before (or when) the one it "lacks"
completed was capturing then: that is no capture edge. The plant: 4 ranks of one group run STEPS × 5
collectives; each ends TRANSFER after its last arrival, and each rank's span of it ends a further DRIFT (up to
most of the spacing) later. The answers are the plant's: which collectives each rank's records hold."""

from __future__ import annotations

import numpy as np
import pytest

from llmdiag.diagnose.metrics.job.skew import skew
from llmdiag.diagnose.metrics.rank.collectives import Collectives

RANKS = 4
STEPS = 6
PER_STEP = 5
WORK = 4_000_000  # ns of own work before each collective
TRANSFER = 500_000
KEYS = [("mesh_tp[0, 1, 2, 3]", "allreduce")]


def plant(seed: int, drift_ns: int, lacks: dict[int, int] | None = None,
          ends_early: dict[int, int] | None = None) -> dict[int, Collectives]:
    """`lacks`: rank -> collectives at the start its capture missed (its records begin after they ended);
    `ends_early`: rank -> collectives at the end it missed."""
    rng = np.random.default_rng(seed)
    n = STEPS * PER_STEP
    arrive = np.zeros((RANKS, n), np.int64)
    done = np.zeros(n, np.int64)
    prev = 0
    for j in range(n):
        arrive[:, j] = prev + WORK + rng.integers(0, 300_000, RANKS)
        done[j] = prev = arrive[:, j].max() + TRANSFER
    out = {}
    for r in range(RANKS):
        keep = np.ones(n, bool)
        keep[:(lacks or {}).get(r, 0)] = False
        if (ends_early or {}).get(r):
            keep[n - ends_early[r]:] = False
        end = done + rng.integers(0, drift_ns + 1, n)  # the rank's span ends when its thread runs again
        m = int(keep.sum())
        out[r] = Collectives(list(KEYS), np.zeros(m, np.int32), np.arange(m, dtype=np.int32), arrive[r, keep],
                             end[keep])
    return out


def _windows(records) -> dict[int, tuple[int, int]]:
    sk = skew(records, {r: "h0" for r in records}, {})
    return {w.rank: (w.lead_n, w.trail_n) for w in sk.capture_windows}


@pytest.mark.parametrize("seed", range(5))
def test_same_captures_with_drifting_completions_are_no_late_capture(seed):
    """Every rank recorded every collective: whatever the matcher pairs, nobody's capture starts or ends late."""
    assert _windows(plant(seed, drift_ns=3_500_000)) == {}


@pytest.mark.parametrize("seed", range(3))
def test_a_real_late_start_and_early_end_are_still_named(seed):
    """Rank 2's records begin after the job's first two collectives ended everywhere, rank 1's end before the
    last one: both are capture edges, each counted."""
    got = _windows(plant(seed, drift_ns=200_000, lacks={2: 2}, ends_early={1: 1}))
    assert got == {2: (2, 0), 1: (0, 1)}
