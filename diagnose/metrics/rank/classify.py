"""Sorts every event into compute / comm / memcpy / memset / sync / host kinds.

GPU traces: device-side events (those on a stream) are the timeline. A kernel is communication, in this
order of evidence: (1) it was launched under a host communication op (host_ops.py: `record_param_comms`,
`nccl:*`, `c10d::*`, `symm_mem::*`, ...), whatever its name, and its kind comes from that op (so an
all_to_all run as `ncclKernel_SendRecv` is an all_to_all); or it carries Kineto's `Collective name` args
(copied from that same op); (2) its name is in the family table (comm_families.py: NCCL/RCCL/MSCCL, DeepEP,
torch symmetric memory, custom all-reduce, NVSHMEM, TE userbuffers); (3) it matches the user's
`--comm-regex`. A kernel that matches none but whose name looks like communication stays compute and is
reported once, naming `--comm-regex`. CPU-only (gloo) traces: the real work of a collective is a
`gloo:<op>` span on a `pt_gloo_runloop` thread; compute is the top-level ops of the training threads, minus
the short `c10d::*` enqueue ops, the blocking waits and the collectives' autograd wrappers (which block until
their collective completes), which are classed as sync.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.io.trace import ANNOTATION, COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, OTHER, RUNTIME, SYNC, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.comm_families import NAME_CAP, family_of, looks_like_comm
from llmdiag.diagnose.metrics.rank.name_memo import per_name
from llmdiag.diagnose.model.lazy_re import lazy_compile

MEMCPY_RE = re.compile(r"^(Memcpy|memcpy|dma)|^hipMemcpy|CopyDeviceToDevice|CopyHostToDevice|CopyDeviceToHost")
MEMSET_RE = re.compile(r"^(Memset|memset)|FillBuffer")
SYNC_KERNEL_RE = re.compile(r"Sync\b|^cuda.*Synchronize|Event Sync|Stream Wait", re.I)
# Host-side ops that are communication bookkeeping or blocking, not compute. The autograd wrappers of
# collectives (torch.distributed.nn.functional's `_AlltoAllSingle`, `_AllGather`, `_Reduce_Scatter`, ...; Megatron's
# `_AllToAll`, `_AllGatherFromSequenceParallelRegion`, `_ReduceScatterToSequenceParallelRegion`) and their
# backward nodes enqueue the collective and block until it completes: on a CPU trace their span is waiting on
# communication (issue #28.3: a blocking gloo all-to-all read as 86.7 % overlapped when counted as compute).
HOST_COMM_RE = re.compile(
    r"^(c10d::|c10d_functional::|_c10d_functional::|_c10d_functional_autograd::|record_param_comms|nccl:|gloo:)"
    r"|^torch\.distributed|ProcessGroup|^aten::wait|wait_tensor|^_dtensor::"
    r"|^_(?:All[Tt]oAll(?:Single)?|AllGather\w{0,64}|AllReduce|Reduce_?Scatter\w{0,64})(?:Backward\d{0,3})?$"
    r"|^autograd::engine::evaluate_function: _(?:All[Tt]oAll(?:Single)?|AllGather\w{0,64}|AllReduce|"
    r"Reduce_?Scatter\w{0,64})Backward\d{0,3}$"
)
GLOO_RE = lazy_compile(r"^gloo:")


def prefiltered(regex: re.Pattern, *needles: str):
    """regex.search(name) as a predicate, tried only on names holding one of `needles` (lower-cased when the
    regex ignores case): a substring test is ~50x cheaper than an unanchored alternation over a 2 kB
    templated kernel name, and each needle is a substring every match must contain, so the answer is the
    regex's own. Answered once per distinct name (name_memo.py)."""
    fold = bool(regex.flags & re.I)
    search = regex.search

    @per_name
    def test(name: str) -> bool:
        head = name[:NAME_CAP]  # linear time on hostile names: every needle sits in a real name's head
        n = head.lower() if fold else head
        for x in needles:
            if x in n:
                return search(head) is not None
        return False

    return test


is_memcpy = prefiltered(MEMCPY_RE, "emcpy", "dma", "Copy")
is_memset = prefiltered(MEMSET_RE, "emset", "FillBuffer")
is_sync_kernel = prefiltered(SYNC_KERNEL_RE, "sync", "stream wait")
is_host_comm = prefiltered(HOST_COMM_RE, "c10d", "record_param_comms", "nccl:", "gloo:", "torch.distributed",
                           "ProcessGroup", "aten::wait", "wait_tensor", "_dtensor::", "_All", "_Reduce")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "gpu_op")
HOST_CATS_OP = ("cpu_op", "operator")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver", "hip_runtime", "privateuse1_runtime")
ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation", "Trace", "trace")


def classify(t: RankTrace, comm_regex: str | None = None) -> np.ndarray:
    """Kind code per event (see trace.py), stored in `t.kind` and returned."""
    n = len(t)
    kind = np.full(n, OTHER, np.int8)
    user = re.compile(comm_regex) if comm_regex else None
    device = (t.stream >= 0) | t.cat_mask(*GPU_CATS)
    device &= ~t.cat_mask("gpu_user_annotation")

    host = ~device
    kind[host & t.cat_mask(*RUNTIME_CATS)] = RUNTIME
    kind[host & t.cat_mask(*ANNOTATION_CATS)] = ANNOTATION
    ops = host & t.cat_mask(*HOST_CATS_OP)
    kind[ops] = CPU_OP

    if device.any():
        kernel_like = device & ~t.cat_mask("gpu_memcpy", "gpu_memset", "cuda_sync")
        kind[kernel_like] = COMPUTE
        kind[device & t.cat_mask("gpu_memcpy")] = MEMCPY
        kind[device & t.cat_mask("gpu_memset")] = MEMSET
        kind[device & t.cat_mask("cuda_sync")] = SYNC
        kind[t.name_mask(is_memcpy, kernel_like)] = MEMCPY
        kind[t.name_mask(is_memset, kernel_like)] = MEMSET
        kind[t.name_mask(is_sync_kernel, kernel_like)] = SYNC
        _classify_device_comm(t, kind, kernel_like & (kind == COMPUTE), user)

    if not device.any():
        _classify_cpu_only(t, kind, ops, user)
    t.kind = kind
    return kind


def _classify_device_comm(t: RankTrace, kind: np.ndarray, kernels: np.ndarray, user) -> None:
    """Marks communication kernels (host op, args, family, user regex, in that order) and gives each the
    args its kind is read from; warns once about comm-looking kernels nothing explains."""
    comm = np.zeros(len(t), bool)
    for d, h in host_ops.comm_launches(t, kind).items():
        if not kernels[d]:
            continue
        comm[d] = True
        own = t.comm_args.get(d, {})
        if own.get("Collective name"):
            continue  # Kineto copied the launching op's args onto the kernel: already host evidence
        args = {**t.comm_args.get(h, {}), **own, "Host op": t.names[t.name[h]][:200]}
        if not args.get("Collective name"):
            args["Collective name"] = collective_kind(t.names[t.name[h]])
        t.comm_args[d] = args
    if t.comm_args:
        has_args = np.zeros(len(t), bool)
        has_args[[i for i, a in t.comm_args.items() if "Collective name" in a]] = True
        comm |= has_args & kernels
    families = {}
    for i in np.flatnonzero(np.bincount(t.name[kernels & ~comm], minlength=len(t.names))).tolist():
        f = family_of(t.names[i])
        if f is not None:
            families[i] = f
    if families:
        fam = kernels & ~comm & np.isin(t.name, list(families))
        comm |= fam
        for d in np.flatnonzero(fam).tolist():
            f = families[int(t.name[d])]
            if f.kind and not t.comm_args.get(d, {}).get("Collective name"):
                t.comm_args[d] = {**t.comm_args.get(d, {}), "Collective name": f.kind, "Comm family": f.name}
    if user is not None:
        comm |= t.name_mask(lambda nm: user.search(nm[:NAME_CAP]) is not None, kernels)
    kind[comm] = COMM
    unexplained = t.name_ids(looks_like_comm, kernels & ~comm)
    if len(unexplained):  # worded the same on every rank that has them: the analysis reports it once
        example = t.names[int(unexplained[0])][:120]
        t.warnings.append(f"{len(unexplained)} kernel name(s) look like communication but match no known family "
                          f"(e.g. {example!r}): counted as compute; pass --comm-regex to count them as "
                          "communication")


def gloo_threads(t: RankTrace) -> set[int]:
    """Threads that run gloo work: named pt_gloo_runloop, or carrying only gloo:* spans."""
    named = {i for i, nm in t.thread_names.items() if "gloo" in nm}
    gloo = t.name_mask(GLOO_RE.search)
    if gloo.any():
        ops_threads = set(distinct(t.thread[t.cat_mask(*HOST_CATS_OP)]).tolist())
        named |= set(distinct(t.thread[gloo]).tolist()) - ops_threads
    return named


def _classify_cpu_only(t: RankTrace, kind: np.ndarray, ops: np.ndarray, user) -> None:
    """CPU-only traces: gloo spans are comm; top-level ops on training threads are compute."""
    comm = t.name_mask(GLOO_RE.search)
    if user is not None:
        comm |= t.name_mask(user.search)
    kind[comm] = COMM
    workers = gloo_threads(t)
    training = ops & ~np.isin(t.thread, list(workers)) if workers else ops.copy()
    top = top_level(t, training)
    host_comm = t.name_mask(is_host_comm)
    kind[top & ~host_comm] = COMPUTE
    kind[top & host_comm & ~comm] = SYNC
    # Enqueue ops and waits nested in compute (DDP's hooks inside autograd nodes) are carved out of it.
    kind[training & ~top & host_comm & ~comm] = SYNC


def top_level(t: RankTrace, mask: np.ndarray) -> np.ndarray:
    """Events of `mask` not nested inside an earlier event of `mask` on the same thread."""
    idx = np.flatnonzero(mask)
    out = np.zeros(len(t), bool)
    if len(idx) == 0:
        return out
    # Sort by (thread, ts, -dur) so a parent comes before its children that start at the same time.
    o = np.lexsort((-t.dur[idx], t.ts[idx], t.thread[idx]))
    idx = idx[o]
    th, s, e = t.thread[idx], t.ts[idx], t.ts[idx] + t.dur[idx]
    first = np.ones(len(idx), bool)
    first[1:] = th[1:] != th[:-1]
    # Running max of ends, restarted per thread: offset each thread's times so maxima never leak across.
    # Times are first replaced by their rank among all starts and ends (order-preserving, < 2n), so the
    # offsets cannot overflow int64 however far apart the timestamps are.
    vals = distinct(np.concatenate([s, e]))
    s = np.searchsorted(vals, s).astype(np.int64)
    e = np.searchsorted(vals, e).astype(np.int64)
    grp = np.cumsum(first) - 1
    off = grp.astype(np.int64) * (len(vals) + 1)
    run = np.maximum.accumulate(e + off)
    prev = np.empty(len(idx), np.int64)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = run[:-1]
    is_top = first | (s + off >= prev)
    out[idx[is_top]] = True
    return out


def collective_kind(name: str, args: dict | None = None) -> str:
    """Normalised collective kind from `Collective name` args or the kernel/op name."""
    raw = ""
    if args:
        raw = str(args.get("Collective name", "") or "")
    if raw:  # only the name's head is read beside the args' kind (batched p2p): a shorter cache key
        name = name[:64]
    return (_kind if len(name) + len(raw) <= 4096 else _kind.__wrapped__)(raw, name)  # hostile names: not kept


@functools.lru_cache(maxsize=8192)  # a trace has few distinct (op, kernel) names and thousands of collectives
def _kind(raw: str, name: str) -> str:
    if not raw:
        n = name
        for prefix in ("gloo:", "c10d::", "_c10d_functional::", "nccl:"):
            if n.startswith(prefix):
                n = n[len(prefix) :]
        m = re.match(r"(?:ncclDevKernel|ncclKernel|rcclKernel)_([A-Za-z]+)", n)
        raw = m.group(1) if m else n.split("(")[0]
    k = raw.lower().replace("_", "").replace("base", "").rstrip("_")
    if k == "coalesced" and "SendRecv" in name[:64]:  # batch_isend_irecv: one SendRecv kernel for a batch of p2p
        return "sendrecv"
    for key in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv", "barrier",
                "reduce", "send", "recv", "gather", "scatter"):
        if k.startswith(key) or k.endswith(key):
            return key
    return k or "unknown"
