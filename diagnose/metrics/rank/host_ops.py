"""Device events linked to the host ops that launched them.

A kernel's launch is the runtime call (cudaLaunchKernel, hipExtLaunchKernel, ...) carrying the same
`correlation` id; the host ops enclosing that call on its thread are the kernel's call stack. Kineto
writes `correlation` into both events in every schema we know (2021 to 2025; the `ac2g` /
`async_cpu_to_gpu` flow events of older traces repeat the same id, so they add nothing). The
`External id` of a kernel names its innermost op only in recent traces (older ones copy the
correlation into it), so the call stack is found by nesting, which works in both.

What this gives classification: whether a kernel ran under a host communication op
(`record_param_comms`, `nccl:*`, `c10d::*`, `_c10d_functional::*`, `symm_mem::*`, `vllm::all_reduce`,
...), and which one says the most about it (the innermost carrying `Collective name`, else the
innermost whose name names a collective).
"""

from __future__ import annotations

import re
import weakref

import numpy as np

from llmdiag.diagnose.metrics.rank.sets import distinct, member
from llmdiag.diagnose.io.trace import ANNOTATION, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.comm_families import NAME_CAP

# Host ops whose kernels are communication. Waits are excluded (they launch nothing that moves data).
# (no `broadcast` here: prims::broadcast_in_dim, aten::broadcast_tensors are no communication; c10d's and
# NCCL's broadcasts are covered by the prefixes)
_NAMESPACED_COLL = re.compile(r"^\w{1,64}::\w{0,64}?(?:all_reduce|allreduce|all_gather|allgather|reduce_scatter|"
                              r"reducescatter|all_to_all|alltoall)")
_PREFIXES = ("record_param_comms", "nccl:", "rccl:", "c10d::", "_c10d_functional::", "c10d_functional::",
             "_c10d_functional_autograd::", "symm_mem::")


def is_comm_op(name: str) -> bool:
    head = name[:NAME_CAP]
    if "wait" in head[:80]:
        return False
    return head.startswith(_PREFIXES) or is_custom_comm_op(head)


def is_custom_comm_op(name: str) -> bool:
    """A dispatched custom op naming a collective (`vllm::all_reduce`, `trtllm::allreduce`): its kernels are the
    collective. Copies around a collective (`*copy_in`, `*copy_out`) are not communication."""
    head = name[:NAME_CAP]
    return (not head.startswith("aten::") and "copy" not in head[:120]
            and _NAMESPACED_COLL.match(head) is not None)


def is_prefixed_comm_op(name: str) -> bool:
    head = name[:NAME_CAP]
    return "wait" not in head[:80] and head.startswith(_PREFIXES)


def comm_launches(t: RankTrace, op_kind: np.ndarray) -> dict[int, int]:
    """Device event index -> index of the host communication op that explains it (see module doc).

    `op_kind` is classify's kind array so far (host ops and runtime calls already sorted)."""
    # Annotations (record_function spans: `nccl:all_reduce`, FSDP2's `FSDP::all_gather`, a user's own) count only
    # under the communication prefixes: a span named for a collective also encloses its copy-in/out kernels and
    # whatever else the caller launches there. Dispatched custom ops (cpu_op) naming a collective count too.
    ops = (t.name_mask(is_comm_op, (t.stream < 0) & (op_kind == CPU_OP))
           | t.name_mask(is_prefixed_comm_op, (t.stream < 0) & (op_kind == ANNOTATION)))
    return launching_ops(t, np.flatnonzero(ops), op_kind, lambda o: _score(t, o))


# The last trace's answers without a score, by the exact `ops` asked: op_kernels and data_movement both ask for
# every host op's kernels, precision (twice) and roofline for the same GEMM ops: 4-12 ms of a real trace's run.
_MEMO: dict = {"trace": None, "kind": None, "got": {}}
MEMO_ENTRIES = 4


def launching_ops(t: RankTrace, ops: np.ndarray, op_kind: np.ndarray, score=None) -> dict[int, int]:
    """Device event index -> the op of `ops` enclosing its launch (innermost; among the best by `score`). Asked
    again about the same trace, kinds and ops (no score), a copy of the first answer."""
    if score is not None:
        return _launching_ops(t, ops, op_kind, score)
    memo = _MEMO
    ref = memo["trace"]
    if ref is None or ref() is not t or memo["kind"] is not op_kind:
        try:
            ref = weakref.ref(t)
        except TypeError:  # a stand-in with no weak references (tests): answered afresh
            return _launching_ops(t, ops, op_kind)
        memo.update(trace=ref, kind=op_kind, got={})
    key = np.asarray(ops, np.int64).tobytes()
    got = memo["got"].get(key)
    if got is None:
        got = _launching_ops(t, ops, op_kind)
        if len(memo["got"]) >= MEMO_ENTRIES:
            memo["got"].clear()
        memo["got"][key] = got
    return dict(got)


def _launching_ops(t: RankTrace, ops: np.ndarray, op_kind: np.ndarray, score=None) -> dict[int, int]:
    if not len(ops):
        return {}
    dev = np.flatnonzero((t.stream >= 0) & (t.corr >= 0))
    if not len(dev):
        return {}
    rt = np.flatnonzero((op_kind == RUNTIME) & (t.corr >= 0))
    rt = rt[member(t.corr[rt], t.corr[dev]) & member(t.thread[rt], t.thread[ops])]
    if not len(rt):
        return {}
    if score:  # runtime index -> op index
        best = _explaining_op(t, ops, rt, score)
        calls = np.fromiter(best.keys(), np.int64, len(best))
        val = np.fromiter(best.values(), np.int64, len(best))
    else:
        calls, val = _innermost_pairs(t, ops, rt)
    if not len(calls):
        return {}
    # correlation id -> op, the last call's op where ids repeat (as a dict built in the calls' order keeps it),
    # then each device event's id looked up: sorts and a searchsorted, not a Python pass over every device event
    key = t.corr[calls]
    o = np.argsort(key, kind="stable")
    key, val = key[o], val[o]
    last = np.ones(len(key), bool)
    np.not_equal(key[1:], key[:-1], out=last[:-1])
    key, val = key[last], val[last]
    c = t.corr[dev]
    i = np.minimum(np.searchsorted(key, c), len(key) - 1)
    hit = key[i] == c
    return dict(zip(dev[hit].tolist(), val[i[hit]].tolist()))


def _score(t: RankTrace, o: int) -> int:
    """How much an enclosing comm op says: 2 its own collective args, 1 a collective in its name."""
    a = t.comm_args.get(o)
    if a and a.get("Collective name"):
        return 2
    return 0 if t.names[t.name[o]] == "record_param_comms" else 1


def _innermost_op(t: RankTrace, ops: np.ndarray, rt: np.ndarray) -> dict[int, int]:
    """The innermost op of `ops` enclosing each runtime call: runtime index -> op index (`_innermost_pairs`)."""
    calls, found = _innermost_pairs(t, ops, rt)
    return dict(zip(calls.tolist(), found.tolist()))


def _innermost_pairs(t: RankTrace, ops: np.ndarray, rt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(runtime calls, the innermost op of `ops` enclosing each), vectorised: the op starting last at or before
    the call (the shortest of equal starts) is the innermost when it still runs; calls whose latest op has ended
    (inside a parent, after a sibling) go through `_innermost_left`. Per thread in thread order, then those."""
    calls, found, rest = [], [], []
    for th in distinct(t.thread[rt]).tolist():
        o = ops[t.thread[ops] == th]
        o = o[np.lexsort((-t.dur[o], t.ts[o]))]
        r = rt[t.thread[rt] == th]
        r_ts = t.ts[r]
        j = np.searchsorted(t.ts[o], r_ts, side="right") - 1
        cand = o[np.maximum(j, 0)]
        hit = (j >= 0) & (t.ts[cand] + t.dur[cand] >= r_ts)
        calls.append(r[hit])
        found.append(cand[hit])
        rest.append(r[(j >= 0) & ~hit])
    if rest and (left := np.concatenate(rest)).size:
        c, f = _innermost_left_pairs(t, ops, left)
        calls.append(c)
        found.append(f)
    if not calls:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(calls).astype(np.int64, copy=False), np.concatenate(found).astype(np.int64, copy=False)


def _innermost_left(t: RankTrace, ops: np.ndarray, rt: np.ndarray) -> dict[int, int]:
    """`_innermost_left_pairs` as a dict, call -> op."""
    calls, found = _innermost_left_pairs(t, ops, rt)
    return dict(zip(calls.tolist(), found.tolist()))


def _innermost_left_pairs(t: RankTrace, ops: np.ndarray, rt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_explaining_op` with every op scored alike, without its Python sweep over all the thread's ops: that
    sweep returns the op on top of its stack, which is the last op (in start order, longer first) started at or
    before the call and not ended before it. Found here by binary lifting over a sparse table of the ops' range
    maxima of end times: from the last op started by the call, whole blocks of ops all ended before it are
    skipped, largest first. Same calls kept, same order, same answers."""
    calls, found = [], []
    for th in distinct(t.thread[rt]).tolist():
        o = ops[t.thread[ops] == th]
        o = o[np.lexsort((-t.dur[o], t.ts[o]))]
        r = rt[t.thread[rt] == th]
        o_end = t.ts[o] + t.dur[o]
        us, ue = iv.union(t.ts[o], o_end)  # only calls inside some op count (as in the sweep)
        if not len(us):
            continue
        k = np.searchsorted(us, t.ts[r], side="right") - 1
        r = r[(k >= 0) & (t.ts[r] <= ue[np.maximum(k, 0)])]
        r = r[np.argsort(t.ts[r], kind="stable")]
        if not len(r):
            continue
        x = t.ts[r]
        cur = np.searchsorted(t.ts[o], x, side="right")  # ops [0, cur) started by the call
        table = [o_end]  # table[l][i] = max(o_end[i : i + 2**l])
        while (1 << len(table)) <= len(o):
            prev, h = table[-1], 1 << (len(table) - 1)
            table.append(np.maximum(prev[:-h], prev[h:]))
        for lvl in range(len(table) - 1, -1, -1):
            start = cur - (1 << lvl)
            ok = start >= 0
            skip = np.zeros(len(cur), bool)
            skip[ok] = table[lvl][start[ok]] < x[ok]
            cur = np.where(skip, start, cur)
        hit = cur > 0
        hit[hit] = o_end[cur[hit] - 1] >= x[hit]
        calls.append(r[hit])
        found.append(o[cur[hit] - 1])
    if not calls:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(calls).astype(np.int64, copy=False), np.concatenate(found).astype(np.int64, copy=False)


def _explaining_op(t: RankTrace, ops: np.ndarray, rt: np.ndarray, score) -> dict[int, int]:
    """For each runtime call, the best enclosing comm op on its thread (innermost among the best scored).
    One sweep per thread over ops (sorted by start, longer first) and calls (sorted by time) with a stack
    of open ops: linear after the sort."""
    out: dict[int, int] = {}
    ends = t.ts + t.dur
    for th in distinct(t.thread[rt]).tolist():
        o = ops[t.thread[ops] == th]
        o = o[np.lexsort((-t.dur[o], t.ts[o]))]
        r = rt[t.thread[rt] == th]
        us, ue = iv.union(t.ts[o], ends[o])  # only calls inside some op go through the Python sweep
        if not len(us):  # the thread's ops are all zero-length (no dur): none encloses a call
            continue
        k = np.searchsorted(us, t.ts[r], side="right") - 1
        r = r[(k >= 0) & (t.ts[r] <= ue[np.maximum(k, 0)])]
        r = r[np.argsort(t.ts[r], kind="stable")]
        r_ts, o_ts = t.ts[r].tolist(), t.ts[o].tolist()  # Python ints: the sweep reads no numpy scalar
        end = dict(zip(o.tolist(), ends[o].tolist()))
        o = o.tolist()
        stack: list[int] = []
        j = 0
        for call, ts in zip(r.tolist(), r_ts):
            while j < len(o) and o_ts[j] <= ts:
                while stack and end[stack[-1]] < o_ts[j]:
                    stack.pop()
                stack.append(o[j])
                j += 1
            while stack and end[stack[-1]] < ts:
                stack.pop()
            live = [s for s in stack if end[s] >= ts]
            if live:
                out[call] = max(reversed(live), key=score)
    return out
