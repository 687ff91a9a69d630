"""Data-movement kernels of one rank per family (model/data_movement.py), from its own events.

A kernel's family is read from its name, the same in CUDA and ROCm traces (HIP keeps PyTorch's kernel names):
`CatArrayBatchedCopy*` (cat), cuDNN's `nchwToNhwcKernel` / `nhwcToNchwKernel` and MIOpen's
`batched_transpose_*` (layout), `direct_copy_kernel` / `copy_device_to_device` elementwise kernels (copy). Its
launching op is the innermost `cpu_op` around its launch call (host_ops.launching_ops). Two kernels are left out
because no user edit removes them: layout transposes not launched by a convolution op, and copies launched under
`aten::_to_copy` (`.to(dtype)`, autocast's casts: a conversion, not a move). Memcpy events are no kernels and are
not counted (their rules are exposed_memcpy / pageable_copy). Per family: its device time, the part of it when no
other kernel, memcpy or memset runs on any stream (the device's busy path: what removing them could give back at
most; a collective running beside them does not hide them, it uses few SMs and the compute stream waits behind
them, so that part is kept and also told apart), and its top ops.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from llmdiag.diagnose.io.trace import COMM, COMPUTE, CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.metrics.rank.launches import device_events
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.data_movement import FAMILIES, DataMovement, MoveFamily, MoveOp
from llmdiag.diagnose.model.format import NS_PER_MS

CAT = re.compile(r"CatArray")
LAYOUT = re.compile(r"nchwtonhwc|nhwctonchw|batched_transpose_|nchw2nhwc|nhwc2nchw|transpose_nchw|transpose_nhwc",
                    re.I)
COPY = re.compile(r"direct_copy_kernel|copy_device_to_device")
CONV_OP = re.compile(r"conv", re.I)  # aten::cudnn_convolution, aten::miopen_convolution, aten::convolution_backward
CAST_OP = "aten::_to_copy"
TOP_OPS = 3
NAME_CUT = 120
PARENT_SCAN = 256  # events looked back (×8) for an op's parent
MAX_PARENTS = 4096  # op instances whose parent is looked up (the rest group under no parent)
NO_OP = "(no host op)"


def family_of(name: str) -> str | None:
    """The data-movement family a kernel name belongs to, or None."""
    head = name[:400]
    if CAT.search(head):
        return "cat"
    if LAYOUT.search(head):
        return "layout"
    if COPY.search(head):
        return "copy"
    return None


def family_kernels(t: RankTrace, wins: list[Window]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[int, int]] | None:
    """(device events in the windows, the counted kernels, their family index into FAMILIES, their launching op
    or -1, the launching ops by device event) or None: the kernels the families count (also what the after-fix
    simulation, metrics/rank/critical_path/after_fix.py, removes)."""
    if not wins or not t.is_gpu or t.kind is None:
        return None
    dev = device_events(t, wins)
    kern = dev[t.kind[dev] == COMPUTE]
    ids, inv = np.unique(t.name[kern], return_inverse=True)
    codes = np.array([FAMILIES.index(fa) if (fa := family_of(t.names[int(i)])) else -1 for i in ids.tolist()], np.int64)
    code = codes[inv.reshape(-1)] if len(kern) else np.zeros(0, np.int64)
    kern, code = kern[code >= 0], code[code >= 0]
    if not len(kern):
        return None
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
    by_dev = host_ops.launching_ops(t, ops, t.kind) if len(ops) else {}
    casts = np.flatnonzero(t.name_mask(lambda s: s == CAST_OP, (t.kind == CPU_OP) & (t.stream < 0)))
    under_cast = host_ops.launching_ops(t, casts, t.kind) if len(casts) else {}
    op_of = np.array([by_dev.get(i, -1) for i in kern.tolist()], np.int64)
    conv_name = {g: bool(CONV_OP.search(t.names[g][:200])) for g in distinct(t.name[op_of[op_of >= 0]]).tolist()}
    conv = np.array([o >= 0 and conv_name[int(t.name[o])] for o in op_of.tolist()], bool)
    layout, copy = FAMILIES.index("layout"), FAMILIES.index("copy")
    keep = (code != layout) | conv
    keep &= (code != copy) | np.array([i not in under_cast for i in kern.tolist()], bool)
    return dev, kern[keep], code[keep], op_of[keep], by_dev


def data_movement(t: RankTrace, wins: list[Window]) -> DataMovement | None:
    got = family_kernels(t, wins)
    if got is None or t.kind is None:
        return None
    dev, kern, code, op_of, by_dev = got
    n = len(wins)
    out = []
    for c, name in enumerate(FAMILIES):
        sel = code == c
        if not sel.any():
            continue
        k = kern[sel]
        others = np.setdiff1d(dev[t.kind[dev] != COMM], k, assume_unique=True)
        mine = iv.union(t.ts[k], t.ts[k] + t.dur[k])
        alone = iv.difference(mine, iv.union(t.ts[others], t.ts[others] + t.dur[others]))
        busy = iv.total(alone)
        comm = dev[t.kind[dev] == COMM]
        under = iv.intersect_total(alone, iv.union(t.ts[comm], t.ts[comm] + t.dur[comm]))
        times: Counter[int] = Counter()
        for i, d in zip(t.name[k].tolist(), t.dur[k].tolist()):
            times[i] += d
        top = max(times.items(), key=lambda x: (x[1], -x[0]))[0]
        f = MoveFamily(name, kernel_ms=float(t.dur[k].sum()) / NS_PER_MS / n, busy_ms=busy / NS_PER_MS / n,
                       under_comm_ms=under / NS_PER_MS / n, count=len(k) / n, kernel=t.names[top][:NAME_CUT],
                       ops=_ops(t, k, op_of[sel], n))
        if name == "layout":
            f.nhwc_convs = _nhwc(t, dev, by_dev, op_of[sel])
        out.append(f)
    return DataMovement(out) if out else None


def _ops(t: RankTrace, k: np.ndarray, op_of: np.ndarray, n: int) -> list[MoveOp]:
    """The launching ops by (name, parent name), most device time first."""
    memo: dict[int, int] = {}
    host = _HostOps(t)
    parent = np.array([memo.setdefault(o, _parent(t, o, host)) if o >= 0 and (o in memo or len(memo) < MAX_PARENTS)
                       else -1 for o in op_of.tolist()], np.int64)
    key = np.where(op_of >= 0, t.name[np.maximum(op_of, 0)], -1).astype(np.int64) * (len(t.names) + 1) + parent + 1
    rows = []
    for g in distinct(key).tolist():
        m = key == g
        op, par = g // (len(t.names) + 1), g % (len(t.names) + 1) - 1
        rows.append(MoveOp(t.names[op][:NAME_CUT] if op >= 0 else NO_OP, t.names[par][:NAME_CUT] if par >= 0 else "",
                           float(t.dur[k[m]].sum()) / NS_PER_MS / n, int(m.sum()) / n))
    rows.sort(key=lambda r: (-r.ms, r.op, r.parent))
    return rows[:TOP_OPS]


class _HostOps:
    """The host `cpu_op`s of each thread in event order, with their starts, ends and names in that order: an op's
    parent candidates are a slice of its thread's, not a mask over every event near it (~20 µs a look-up on
    ~2,000 events: ~13 ms of nccl_data's run)."""

    def __init__(self, t: RankTrace) -> None:
        assert t.kind is not None
        cpu = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0))
        order = np.argsort(t.thread[cpu], kind="stable")  # by thread, each thread's ops still in event order
        self.ops = cpu[order]
        self.ts, self.name = t.ts[self.ops], t.name[self.ops]
        self.end = self.ts + t.dur[self.ops]
        self.dur = t.dur[self.ops]
        thr = t.thread[self.ops]
        cut = (np.flatnonzero(thr[1:] != thr[:-1]) + 1).tolist()
        starts, ends = [0, *cut], [*cut, len(self.ops)]
        self.span = {int(thr[a]): (a, b) for a, b in zip(starts, ends)} if len(self.ops) else {}

    def near(self, thread: int, lo: int, hi: int) -> tuple[int, int]:
        """Positions [a, b) of the thread's host ops with an event index in [lo, hi)."""
        a, b = self.span.get(thread, (0, 0))
        ops = self.ops[a:b]
        return a + int(np.searchsorted(ops, lo)), a + int(np.searchsorted(ops, hi))


def _parent(t: RankTrace, o: int, host: _HostOps) -> int:
    """The name id of the innermost `cpu_op` of the same thread enclosing op `o` under another name (a nested
    `aten::cat` in `aten::cat` says nothing); -1 where none is found close before it."""
    start = t.ts[o]
    end = start + t.dur[o]
    a, b = host.near(int(t.thread[o]), max(0, o - PARENT_SCAN * 8), min(len(t.ts), o + 8))  # equal starts may
    ok = (host.ts[a:b] <= start) & (host.end[a:b] >= end) & (host.name[a:b] != t.name[o])  # sort after `o`
    ok &= host.ops[a:b] != o
    hit = np.flatnonzero(ok) + a
    if not len(hit):
        return -1
    return int(host.name[hit[np.lexsort((host.dur[hit], -host.ts[hit]))[0]]])  # the latest start, then the shortest


def _nhwc(t: RankTrace, dev: np.ndarray, by_dev: dict[int, int], layout_op: np.ndarray) -> bool:
    """Did the convolution ops that launched the transposes also launch kernels whose names say NHWC (other than
    the transposes themselves)?"""
    assert t.kind is not None
    convs = set(layout_op[layout_op >= 0].tolist())
    k = np.array([i for i in dev[t.kind[dev] == COMPUTE].tolist() if by_dev.get(i, -1) in convs], np.int64)
    names = [t.names[i][:400] for i in distinct(t.name[k]).tolist()] if len(k) else []
    return any("nhwc" in s.lower() and not LAYOUT.search(s) for s in names)
