"""Where a rank's own path waited through a collective with nothing recorded: the cuts the job's path crosses.

A host thread with no recorded point for a long stretch, inside an op or not, that comes back just after one of
the rank's collectives ends, was waiting on that collective: an allocator flush (a failed `cudaMalloc` frees the
cache, and its unrecorded synchronize waits for the device) or a wait the profiler did not record. In TorchRec's
sst_sleep_pl_dense_after_backward_2, rank 3 sits 1.0 s inside `aten::cat` after a 3 ms `cudaMalloc`, and its
first `cudaFree` begins 65 µs after the all_to_all that waited 1.0 s for rank 2 ends. The rank's graph has no
edge from that collective into the host (resume.py reads only gaps with no op open), so the rank's own path runs
back through the stretch as host time, and the job's path (metrics/job/critical_path.py) held the rank that
merely waited, never reaching the member the collective waited for.

Here, for every such stretch that the rank's own path crosses (the gap is the binding edge of the point ending
it), the walks of hops.py (walks.Walks) are run again with that point as one more stop: a walk that reaches it passes through
the stretch, and what it summed until then is the rank's path above the resume, exact. The coordinator then
leaves the rank there for the collective (its end; the resume's lag after it counts as host time) and crosses it
as any other. Only windows holding such a point are walked again: none in most traces.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field  # its __init__ compiled once per user (model/code_cache.py)

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.graph import THREAD
from llmdiag.diagnose.metrics.rank.critical_path.hops import PathHops
from llmdiag.diagnose.metrics.rank.critical_path.path import Walker
from llmdiag.diagnose.metrics.rank.critical_path.resume import IDLE_MIN_NS
from llmdiag.diagnose.metrics.rank.critical_path.walks import NCAT, Walks, row_stops

# A resume this soon after a collective's end was waiting on it. Recorded synchronize calls return 1-52 µs after
# the device op they waited on (resume.py); an unrecorded wait adds the code up to the next recorded call (65 µs
# in the allocator flush above). The bound is graph.py's WAIT_TOL_NS for a stream waiting on another's op.
CUT_TOL_NS = 100_000


@dataclass
class PathCuts:
    """Per cut: the hop (row of PathHops, or rows + window) whose walk passed through a resume, the collective
    row the resume waited on, the resume's time (the rank's clock, ns) and the walk's ns per HTA category above
    the resume (from the hop's top down to it)."""

    hop: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    at: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cats: np.ndarray = field(default_factory=lambda: np.zeros((0, NCAT), np.float32))


def path_cuts(w: Walker, hops: PathHops, row_ev: np.ndarray, row_start: np.ndarray, row_end: np.ndarray, wins,
              extra: np.ndarray | None = None, t=None) -> PathCuts | None:
    """The cuts of a rank whose hops are `hops`, built by hops.path_hops from the same collective rows (events
    `row_ev`, beginning at `row_start`, ending at `row_end`), windows and send/recv kernels `extra` of trace `t`;
    None where no long stretch of its host ends just after one of those rows' ends."""
    g = w.g
    if extra is not None and len(extra):
        row_ev = np.concatenate([row_ev, extra])
        row_start = np.concatenate([row_start, t.ts[extra]])
        row_end = np.concatenate([row_end, t.ts[extra] + t.dur[extra]])
    n = len(row_ev)
    if not n or n != hops.rows or not len(g.src):
        return None
    long_ = np.flatnonzero((g.time[g.dst] - g.time[g.src] >= IDLE_MIN_NS) & (g.etype == THREAD))
    if not len(long_):
        return None
    src, dst = g.src[long_], g.dst[long_]
    o = np.argsort(row_end, kind="stable")
    ends = row_end[o]
    r = g.time[dst]
    j = np.searchsorted(ends, r, side="right") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (ends[jj] >= r - CUT_TOL_NS) & (ends[jj] > g.time[src])
    # ... and the stretch is what the point ending it waited on (its binding edge): the rank's path crosses it
    pred = w.preds
    ok[ok] = [pred[d] == u for d, u in zip(dst[ok].tolist(), src[ok].tolist())]
    if not ok.any():
        return None
    node, row = dst[ok], o[jj[ok]]
    return _walk_again(w, hops, row_ev, row_start, wins, node, row, n)


def _walk_again(w: Walker, hops: PathHops, row_ev, row_start, wins, node, row, n) -> PathCuts | None:
    """hops.path_hops's walks, in the windows holding a resume, with each resume one more stop (rows n, n+1...)."""
    g = w.g
    pos, found, stop = row_stops(g, row_ev)
    extra_stop = {int(v): n + k for k, v in enumerate(node.tolist()) if int(v) not in stop}
    stop.update(extra_stop)
    starts = np.array([x.start for x in wins], np.int64)
    at_win = np.searchsorted(starts, g.time[node], side="right") - 1
    hop, cut_row, at, cats = [], [], [], []
    for k in sorted(set(at_win[at_win >= 0].tolist())):
        win = wins[k]
        walk = Walks(w, stop)
        walk.window(win.start)
        sinks = [(i, 2 * int(pos[i]) if found[i] else w.sink(int(row_start[i])), int(row_start[i]))
                 for i in np.flatnonzero(hops.win[:n] == k).tolist()]
        sinks.append((hops.rows + k, w.sink(win.end), win.end))
        for i, sink, end in sinks:
            out = np.zeros(NCAT, np.float32)
            reached = walk.run(sink, end, out)
            if reached >= n:  # passed through a resume: its collective is the cut
                v = node[reached - n]
                hop.append(i)
                cut_row.append(int(row[reached - n]))
                at.append(int(g.time[v]))
                cats.append(out)
    if not hop:
        return None
    return PathCuts(np.array(hop, np.int32), np.array(cut_row, np.int32), np.array(at, np.int64),
                    np.array(cats, np.float32).reshape(-1, NCAT))
