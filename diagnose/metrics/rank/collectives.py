"""One rank's collectives as columns, the rows the cross-rank matcher reads (job/skew.py).

Built in the rank's worker from its communication kernels (or gloo spans): kind, process group, size, posting
and completion times, sequence number where the trace records one. Only these small arrays leave the worker."""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field



@dataclass
class Collectives:
    """One rank's collectives as columns, times on the rank's absolute clock (ns since the global origin).

    Columns, not one object per collective: the parent holds every rank's, and 256 ranks with thousands of
    collectives each must cost megabytes, not a gigabyte.
    """

    keys: list[tuple[str, str]] = field(default_factory=list)  # (process group, kind) per key id
    key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    ordinal: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # n-th of its key on this rank
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    in_n: np.ndarray | None = None  # elements sent (all_to_all(v): the sum of `In split size`), -1 unknown
    out_n: np.ndarray | None = None
    seq: np.ndarray | None = None  # the group's sequence number (Kineto's `Seq`), -1 unknown
    free_lo: np.ndarray | None = None  # the rank's exposed communication (comm − compute) in its windows, a union
    free_hi: np.ndarray | None = None  # (rank/exposed_union.py): what part of a wait was exposed (job/exposed_wait.py)

    def __len__(self) -> int:
        return len(self.key)

    def shifted(self, ns: int) -> "Collectives":
        free = (None, None) if self.free_lo is None or self.free_hi is None else (self.free_lo + ns, self.free_hi + ns)
        return Collectives(self.keys, self.key, self.ordinal, self.start + ns, self.end + ns, self.in_n, self.out_n,
                           self.seq, *free)



def collectives_from(records: list[tuple]) -> Collectives:
    """(process group, kind, start ns, end ns[, in elements, out elements[, seq]]) in time order -> columns,
    each numbered within its key."""
    ids: dict[tuple[str, str], int] = {}
    key = [ids.setdefault((r[0], r[1]), len(ids)) for r in records]
    counts = [0] * len(ids)
    ordinal = []
    for k in key:
        ordinal.append(counts[k])
        counts[k] += 1
    sizes = np.array([(r[4], r[5]) if len(r) > 5 else (-1, -1) for r in records], np.int64).reshape(-1, 2)
    return Collectives(list(ids), np.array(key, np.int32), np.array(ordinal, np.int32),
                       np.array([r[2] for r in records], np.int64), np.array([r[3] for r in records], np.int64),
                       sizes[:, 0], sizes[:, 1], np.array([r[6] if len(r) > 6 else -1 for r in records], np.int64))
