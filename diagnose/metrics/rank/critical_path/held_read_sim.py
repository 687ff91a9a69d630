"""The held reads' what-if (rules/held_reads.py): the host no longer waits in the calls that held it for a small
device read or a pageable upload (metrics/rank/held_reads.py), simulated on the rank's dependency graph.

Why a simulation: most of such a hold waits for work queued ahead of the copy, which runs anyway; what the hold
costs is what the host, held, could not queue meanwhile: the device's idle after the drain until the host's next
ops reach it, and every later host delay it then meets with no lead (an allocator call, a slow op). Removing the
sync edges into those calls' ends and re-timing the graph (simulate.py's Simulator) reads that, step by step. A
host freed of a wait would otherwise run ahead of its device without end (the graph holds only the waits the
trace showed): each step's new length is at least its device floor (after_fix.py's, the longest stream's work)
and its old length less its device idle (the same work keeps its overlap: only idle can go). Nothing is
simulated where the graph does not explain the steps (sim_graph.unexplained_share). The mean leaves out the last
step (simulate.py's reason) and steps over OUTLIER_X times the median (a warm-up step's allocator storm, which a
host running ahead hides in the simulation: the outlier's own finding, not the steady step's gain)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.critical_path.after_fix import Scenarios
from llmdiag.diagnose.metrics.rank.critical_path.simulate import NEG, Simulator, simulator
from llmdiag.diagnose.model.format import NS_PER_MS

KEY = "held_read"  # RankMetrics.simulated_gain_ms's key
OUTLIER_X = 1.5  # a step this many times the median step is left out of the mean (it is not the steady step)


def _idle_per_step(t: RankTrace, wins) -> np.ndarray:
    """ns of device idle (no op on any stream) in each window's device span."""
    dev = np.flatnonzero((t.stream >= 0) & (t.kind != ANNOTATION))
    busy = iv.union(t.ts[dev], t.ts[dev] + t.dur[dev])
    a = np.array([w.start for w in wins], np.int64)
    z = np.array([w.end for w in wins], np.int64)
    return (z - a) - iv.overlap_each(a, z, busy)


def held_read_gain(t: RankTrace, wins, reads: list[int] | None, graph=None,
                   sims: Callable[[], Simulator | None] | None = None) -> dict[str, float]:
    """{KEY: ms per step} for removing the waits in `reads` (event indices of the holding calls), or {} where
    nothing is simulated; `graph`: the rank's graph where the path already built it; `sims`: the rank's
    `shared_simulator`."""
    if not reads or not t.is_gpu or not wins or t.kind is None:
        return {}
    sim = (sims or partial(simulator, t, wins, graph))()
    if sim is None:
        return {}
    g = sim.g
    calls = np.unique(np.asarray(reads, np.int64))
    mine = np.zeros(len(g.ev), bool)
    pos = np.searchsorted(g.ev, calls).clip(0, max(len(g.ev) - 1, 0))
    mine[pos[g.ev[pos] == calls]] = True
    w = sim.without_syncs()  # all recorded syncs out (stream-event waits kept) ...
    back = (w == NEG) & ~mine[g.dst // 2]
    w[back] = sim.w[back]  # ... but those into the held reads' calls
    sc = Scenarios(t, sim)
    old = sc.old
    new = np.maximum(sc.new(w), old - _idle_per_step(t, wins))
    d = (old - new).astype(float)
    d, o = (d[:-1], old[:-1]) if len(d) > 1 else (d, old)
    steady = o <= OUTLIER_X * float(np.median(old))  # a warm-up or allocator-storm step is its own finding's
    d = d[steady] if steady.any() else d
    return {KEY: round(max(float(d.mean()), 0.0) / NS_PER_MS, 3)}
