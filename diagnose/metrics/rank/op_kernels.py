"""Op → kernel: which host op launched which device events, and their time (HTA's / TraceLens' op-to-kernel
view). A device event belongs to the innermost host op (`cpu_op`) enclosing its launch call on the launching
thread (diagnose.metrics.host_ops.launching_ops); its launch delay is its start minus the launch call's start
(queueing and launch latency together: Kineto's host and device clocks are one timeline).

Bounded: the TOP_OPS ops with the most device time, the rest summed into one "(other ops)" row; device events
launched outside any host op (or whose launch call is not in the trace) form a "(no host op)" row.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.launches import device_events, launch_calls
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.kernel_views import OpKernels
from llmdiag.diagnose.metrics.rank.sets import distinct, member

TOP_OPS = 20  # rows kept per rank (the rest summed into "(other ops)")
KERNEL_NAMES = 1  # kernel names kept per op row
NAME_CUT = 96  # characters kept of a kernel name
OTHER, NO_OP = "(other ops)", "(no host op)"


def op_kernels(t: RankTrace, wins: list[Window], top: int = TOP_OPS) -> list[OpKernels]:
    """The op → kernel rows of one rank, most device time first ("(other ops)" last where ops were cut)."""
    dev = device_events(t, wins)
    if not len(dev) or t.kind is None:
        return []
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
    by_dev = host_ops.launching_ops(t, ops, t.kind) if len(ops) else {}
    op_name = np.full(len(t.name), -1, np.int64)  # per event: its launching op's name id, -1 for none
    if by_dev:
        op_name[np.fromiter(by_dev.keys(), np.int64, len(by_dev))] = t.name[np.fromiter(by_dev.values(), np.int64,
                                                                                           len(by_dev))]
    op_name = op_name[dev]
    rt = launch_calls(t, dev)
    delay = np.where(rt >= 0, t.ts[dev] - t.ts[np.maximum(rt, 0)], 0)
    dur = t.dur[dev]
    groups, inv = np.unique(op_name, return_inverse=True)
    inv = inv.reshape(-1)
    total = np.bincount(inv, weights=dur, minlength=len(groups))
    count = np.bincount(inv, minlength=len(groups))
    dsum = np.bincount(inv, weights=np.where(rt >= 0, delay, 0), minlength=len(groups))
    dn = np.bincount(inv, weights=(rt >= 0).astype(np.float64), minlength=len(groups))
    # kernel names per group: time per (group, kernel name)
    pair = inv.astype(np.int64) * len(t.names) + t.name[dev]
    pairs, pinv = np.unique(pair, return_inverse=True)
    ptime = np.bincount(pinv.reshape(-1), weights=dur, minlength=len(pairs))
    pg, pk = pairs // len(t.names), pairs % len(t.names)
    named = [g for g in range(len(groups)) if groups[g] >= 0]
    named.sort(key=lambda g: (-total[g], t.names[groups[g]]))
    keep, rest = named[:top], named[top:]

    def row(op: str, gs: list[int]) -> OpKernels:
        sel = member(pg, gs)
        k = pk[sel][np.lexsort((pk[sel], -ptime[sel]))]
        n, tot, n_delay = int(count[gs].sum()), float(total[gs].sum()), float(dn[gs].sum())
        return OpKernels(op=op[:NAME_CUT], kernels=[t.names[i][:NAME_CUT] for i in k[:KERNEL_NAMES].tolist()],
                         distinct=len(distinct(k)), count=n, total_ms=tot / 1e6, mean_us=tot / n / 1e3 if n else 0.0,
                         launch_delay_us=float(dsum[gs].sum()) / n_delay / 1e3 if n_delay else None)

    out = [row(t.names[groups[g]], [g]) for g in keep]
    if rest:
        out.append(row(OTHER, rest))
    if len(groups) and groups[0] < 0:
        out.append(row(NO_OP, [0]))
    return out
