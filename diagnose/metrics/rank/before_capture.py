"""Communication kernels launched before the capture started: their kind and group.

A capture that starts while a collective is in flight holds its kernel but not its launch: no runtime call
carries the kernel's correlation id, so no `record_param_comms` / `nccl:*` op says what it was. Read from its
name alone, an `ncclDevKernel_SendRecv` is point-to-point and an argless kernel has no group, so the record
would be dropped or keyed apart from its peers' and the cross-rank matching could not see that a rank whose
capture started later lacks that collective (issue #27: the TorchRec sleep run's first all_to_all).

NCCL runs each communicator's kernels on that communicator's own stream, so a launchless kernel takes the
(kind, group) of the launched kernels of the same name on the same stream, where they all agree on it (a stream
running both all_to_alls and sends keeps the kernel's own name-read kind); otherwise it keeps what its name says.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank.sets import member


def launchless(t: RankTrace, idx: np.ndarray) -> np.ndarray:
    """Of the device events `idx`, those launched before the capture: no runtime call carries their
    correlation id, and they start before every launched event of their stream (a stream runs in launch
    order; a launchless kernel after a launched one lost its launch otherwise, as in an event-sampled trace).
    A kernel with no correlation id at all is not judged."""
    launches = t.corr[(t.kind == RUNTIME) & (t.corr >= 0)]
    dev = np.flatnonzero((t.stream >= 0) & (t.corr >= 0))
    has = member(t.corr[dev], launches)  # np.isin's sort path would import numpy.ma (~20 ms a run)
    lost = (t.corr[idx] >= 0) & ~member(t.corr[idx], launches)
    if not lost.any():
        return lost
    streams, at = np.unique(np.concatenate([t.stream[dev], t.stream[idx]]), return_inverse=True)
    first = np.full(len(streams), np.iinfo(np.int64).max)  # per stream: the start of its first launched event
    np.minimum.at(first, at[:len(dev)][has], t.ts[dev[has]].astype(np.int64))
    return lost & (t.ts[idx] < first[at[len(dev):]])


def adopt(t: RankTrace, idx: np.ndarray, kind: list[str], group: list[str]) -> list[int]:
    """Gives each launchless event of `idx` the (kind, group) its launched same-name, same-stream kernels
    agree on, in place in `kind` and `group` (parallel to `idx`); returns the positions it changed."""
    lost = launchless(t, idx)
    if not lost.any():
        return []
    seen: dict[tuple[int, int], set[tuple[str, str]]] = {}
    for p in np.flatnonzero(~lost).tolist():
        i = int(idx[p])
        seen.setdefault((int(t.stream[i]), int(t.name[i])), set()).add((kind[p], group[p]))
    changed = []
    for p in np.flatnonzero(lost).tolist():
        i = int(idx[p])
        peers = seen.get((int(t.stream[i]), int(t.name[i])), set())
        if len(peers) == 1:
            kind[p], group[p] = next(iter(peers))
            changed.append(p)
    return changed
