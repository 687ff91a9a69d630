"""Nanoseconds per fine cause -> a CriticalPath: HTA's five categories plus our causes, in percent."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmdiag.diagnose.metrics.rank.critical_path.graph import CAUSES
from llmdiag.diagnose.model.critical_path import CATEGORIES, CriticalPath, RankCriticalPath

# The HTA category each finer cause sums into.
CATEGORY_OF = {
    "host_op": "cpu_bound", "host_gap": "cpu_bound", "runtime": "cpu_bound", "allocator": "cpu_bound",
    "synchronize": "cpu_bound", "compute": "gpu_compute_bound", "memcpy": "gpu_compute_bound",
    "memset": "gpu_compute_bound", "communication": "gpu_communication_bound",
    "launch_delay": "gpu_kernel_launch_overhead", "kernel_gap": "gpu_kernel_kernel_overhead",
    "event_wait": "gpu_kernel_kernel_overhead",
}
assert set(CATEGORY_OF) == set(CAUSES) and set(CATEGORY_OF.values()) <= set(CATEGORIES)


def split(ns: np.ndarray, steps: int | None = None) -> CriticalPath | None:
    """The CriticalPath of one step whose path's time per cause (CAUSES order) is `ns`; with `steps`, the
    RankCriticalPath of that many steps together (with the finer causes). None for an empty path."""
    total = float(ns.sum())
    if total <= 0:
        return None
    by_cat = dict.fromkeys(CATEGORIES, 0.0)
    causes = {}
    for c, v in zip(CAUSES, ns.tolist()):
        by_cat[CATEGORY_OF[c]] += v
        causes[c] = round(100.0 * v / total, 1)  # every key, in one order: a many-rank summary hoists them
    pct: dict[str, Any] = {k: round(100.0 * v / total, 1) for k, v in by_cat.items()}  # the five shares' fields
    if steps is None:
        return CriticalPath(length_ms=round(total / 1e6, 3), **pct)
    return RankCriticalPath(length_ms=round(total / 1e6 / max(steps, 1), 3), causes=causes, **pct)


def split_hta(ns: np.ndarray, steps: int | None = None) -> CriticalPath | None:
    """As split, from HTA's path: ns per HTA category (CATEGORIES order); no finer causes (HTA has none)."""
    total = float(ns.sum())
    if total <= 0:
        return None
    pct = {k: round(100.0 * v / total, 1) for k, v in zip(CATEGORIES, ns.tolist())}
    if steps is None:
        return CriticalPath(length_ms=round(total / 1e6, 3), **pct)
    return RankCriticalPath(length_ms=round(total / 1e6 / max(steps, 1), 3), **pct)
