"""Memory peaks from `[memory]` instant events: the allocator's totals after every (de)allocation."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.analysis import MemoryStat
from llmdiag.diagnose.io.trace import CPU_OP, RankTrace

TIMELINE_POINTS = 400


def memory_stats(t: RankTrace, capacity_cpu: int | None = None) -> list[MemoryStat]:
    m = t.memory
    if len(m.ts) == 0:
        return []
    out = []
    keys = np.unique(np.stack([m.device_type, m.device_id], axis=1), axis=0)
    for dtype, did in keys.tolist():
        sel = np.flatnonzero((m.device_type == dtype) & (m.device_id == did))
        alloc, res, ts = m.allocated[sel], m.reserved[sel], m.ts[sel]
        if (alloc < 0).all():
            # 2021 schema: only signed sizes. Memory held before the trace is unknown, so the running
            # sum is shifted up by its deepest dip: a lower bound of the true peak.
            run = np.cumsum(m.bytes[sel])
            alloc = run - min(0, int(run.min()))
            res = np.zeros_like(alloc)
        j = int(np.argmax(alloc))
        device = f"cuda:{did}" if dtype == 1 else ("cpu" if dtype == 0 else f"dev{dtype}:{did}")
        out.append(
            MemoryStat(
                device=device,
                peak_allocated=int(alloc[j]),
                peak_reserved=int(res.max()) if (res > 0).any() else None,  # CPU, 2021 schema: no reserve
                peak_ms=float(ts[j]) / NS_PER_MS,
                peak_op=_op_at(t, int(ts[j]), int(m.thread[sel][j])),
                capacity=_capacity(t, dtype, did, capacity_cpu),
                timeline=_downsample(ts, alloc, res),
            )
        )
    return out


def _op_at(t: RankTrace, ts: int, thread: int) -> str:
    """Innermost host op on the allocating thread that encloses the allocation."""
    cand = np.flatnonzero((t.kind == CPU_OP) | (t.kind == 0))
    cand = cand[(t.thread[cand] == thread) & (t.ts[cand] <= ts) & (t.ts[cand] + t.dur[cand] >= ts)]
    if len(cand) == 0:
        return ""
    inner = cand[np.argmin(t.dur[cand])]
    return t.names[int(t.name[inner])]


def _capacity(t: RankTrace, dtype: int, did: int, capacity_cpu: int | None) -> int | None:
    if dtype == 0:
        return capacity_cpu
    props = t.meta.get("deviceProperties")
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and p.get("id") == did and isinstance(p.get("totalGlobalMem"), int):
                return int(p["totalGlobalMem"])
    return None


def _downsample(ts: np.ndarray, alloc: np.ndarray, res: np.ndarray) -> list[list[float]]:
    """At most TIMELINE_POINTS points; each bin keeps its maximum so peaks survive."""
    n = len(ts)
    if n <= TIMELINE_POINTS:
        return [[float(a) / NS_PER_MS, int(b), int(c)] for a, b, c in zip(ts, alloc, res)]
    bins = np.linspace(0, n, TIMELINE_POINTS + 1).astype(int)
    out = []
    for a, b in zip(bins[:-1], bins[1:]):
        j = a + int(np.argmax(alloc[a:b]))
        out.append([float(ts[j]) / NS_PER_MS, int(alloc[j]), int(res[a:b].max())])
    return out
