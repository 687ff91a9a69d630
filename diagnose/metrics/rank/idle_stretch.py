"""Long device-idle stretches that one host event covers, named with the ops around it.

The idle breakdown says how much idle each cause holds; the next question is *which* call. A 493 ms
synchronous copy or a 21 ms host op is not launch overhead: fusion and CUDA graphs remove neither, so the
rules name the event instead of advising them. A stretch is a maximal interval of a step's idle that the
host side explains (the blocking-runtime parts, or the host-bound parts), at least LONG_NS long; its event is
the blocking call (runtime parts) or any host op or runtime call (host-bound parts) overlapping at least half
of it (the innermost among near-equal overlaps: `hipFree` rather than the `aten::conv2d` around it), and its
stack the ops enclosing that event on its thread. Work is bounded:
only the MAX_STRETCHES longest stretches of a rank are looked up, against host events at least half as long
as the shortest stretch (an event covering half a stretch is that long). An event is named only when the
device's next work after the stretch was issued from its thread, after it began: a kernel another thread (the
autograd engine's) launched late is not this op's doing.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import AllocStep, IdleStretch
from llmdiag.diagnose.metrics.rank.sets import distinct, median
from llmdiag.diagnose.metrics.rank.event_waits import EventWaits

LONG_NS = 1_000_000  # 1 ms: a stretch shorter than this is many launches' business, not one event's
MAX_STRETCHES = 32  # stretches looked up per rank (the longest); the idle model keeps KEPT of them
KEPT = 8
COVER = 0.5  # the event overlaps at least half of the stretch
STACK = 4  # enclosing ops named
HOST_CAUSES = ("runtime", "host_bound")


def long_stretches(t: RankTrace, steps, blocking: np.ndarray) -> list[IdleStretch]:
    """The longest idle stretches each covered by one host event, longest first. `steps` are metrics/idle's
    StepIdle; a stretch of blocking-runtime idle is named by its call among `blocking` (the mask of blocking
    calls and host sync ops), one of host-bound idle by any host op or runtime call."""
    ss, se, sk, sc = [], [], [], []
    for st in steps:
        for cause in HOST_CAUSES:
            us = [u for c, _, u in st.parts if c == cause]
            if not us:
                continue
            s, e = iv.union_of(*us)
            keep = (e - s) >= LONG_NS
            ss.append(s[keep])
            se.append(e[keep])
            sk.append(np.full(int(keep.sum()), st.step, np.int64))
            sc.append(np.full(int(keep.sum()), cause == "runtime", bool))
    if not ss or not sum(len(x) for x in ss):
        return []
    s, e, k, rt = (np.concatenate(x) for x in (ss, se, sk, sc))
    top = np.argsort(-(e - s), kind="stable")[:MAX_STRETCHES]
    s, e, k, rt = s[top], e[top], k[top], rt[top]
    floor = int(COVER * (e - s).min())
    host = (t.stream < 0) & t.kind_mask(CPU_OP, RUNTIME, ANNOTATION) & (t.dur >= floor)
    cand = np.flatnonzero(host & ~t.name_mask(lambda n: n.startswith("ProfilerStep#"), host))
    if not len(cand):
        return []
    cs, ce, ck, cb = t.ts[cand], t.ts[cand] + t.dur[cand], t.kind[cand], blocking[cand]
    next_launch = _next_launch(t)
    loads = first_use_starts(t)
    waits = EventWaits(t)
    out = []
    for a, b, step, is_rt in zip(s.tolist(), e.tolist(), k.tolist(), rt.tolist()):
        ov = np.minimum(ce, b) - np.maximum(cs, a)
        ok = (ov >= COVER * (b - a)) & (ck != ANNOTATION)  # an op or a call is named, a span only encloses
        if is_rt:
            ok &= cb
        if not ok.any():
            continue
        pool = np.flatnonzero(ok & (ov >= 0.9 * ov[ok].max()))
        j = int(pool[np.lexsort((-cs[pool], t.dur[cand[pool]]))[0]])  # shortest, then latest start: innermost
        i = int(cand[j])
        got = next_launch(b)
        ew = waits.at(i, a, b) if is_rt else None  # work queued before the call, held by an event wait: kept
        if got is None or got[0] != t.thread[i] or (got[1] < t.ts[i] and ew is None):
            continue  # the device's next work was issued elsewhere (or nobody knows by whom): not this op's idle
        later = _first_call(t, i) if not is_rt else None
        out.append(IdleStretch(step=step, idle_ms=float(ov[j]) / NS_PER_MS, op=t.names[t.name[i]][:200],
                               op_ms=float(t.dur[i]) / NS_PER_MS, cause="runtime" if is_rt else "host",
                               stack=_stack(t, cand, cs, ce, ck, i),
                               unrecorded_ms=_unrecorded(t, i) / NS_PER_MS if t.kind[i] == CPU_OP else 0.0,
                               event_wait=ew, later_calls_ms=later,
                               first_use=_first_use(t, i, later, loads, a, b) if not is_rt else 0))
        if len(out) >= KEPT:
            break
    return out


FIRST_CALL = 0.2  # the later calls' median at most this share of the first call's duration: a one-time setup


def _first_call(t: RankTrace, i: int) -> float | None:
    """The median duration (ms) of op i's later calls with the same name and Input Dims, where op i is the first
    such call on the rank and they take at most FIRST_CALL of its time (the first call of a shape sets it up:
    cuBLASLt heuristics, a kernel's first load); else None. Without recorded shapes, the name alone."""
    same = _same_shape(t, i)
    if not len(same) or int(same[0]) != i or len(same) < 2:
        return None
    later = median(t.dur[same[1:]])
    return later / NS_PER_MS if later <= FIRST_CALL * t.dur[i] else None


FIRST_USE = ("Lazy Function Loading",)  # the profiler's event for a kernel the driver loads on its first launch
MODULE_LOAD = ("cuModuleLoad", "cuLibraryLoad")  # driver calls that load a module (cubin/fatbin) into the context


def first_use_starts(t: RankTrace) -> np.ndarray:
    """Sorted start times (ns) of the events that only the first use of a kernel or module in the process records:
    the driver's lazy loading of a kernel at its first launch and explicit module loads. A stall holding one is
    setup work, whether or not the capture calls its op again (b200_vllm: the lm_head `aten::mm`, called once, holds
    a 36 us `Lazy Function Loading`)."""
    m = t.name_mask(lambda n: n in FIRST_USE or n.startswith(MODULE_LOAD))
    return np.sort(t.ts[m])


def _same_shape(t: RankTrace, i: int) -> np.ndarray:
    """Host events with op i's name and Input Dims, in time order."""
    same = np.flatnonzero((t.name == t.name[i]) & (t.stream < 0))
    dims = t.comm_args.get(i, {}).get("Input Dims")
    return same[[t.comm_args.get(int(j), {}).get("Input Dims") == dims for j in same.tolist()]]


def _first_use(t: RankTrace, i: int, later: float | None, loads: np.ndarray, a: int, b: int) -> int:
    """First-use loads starting in the stall [a, b) under op i, counted only where op i is a first call: its later
    calls far shorter (`later`), or its only call of that name and Input Dims (an op called again as slowly is no
    setup, whatever it loaded the first time)."""
    n = int(np.searchsorted(loads, b) - np.searchsorted(loads, a))
    return n if n and (later is not None or len(_same_shape(t, i)) == 1) else 0


def _next_launch(t: RankTrace):
    """A function: time -> (thread, start) of the host event that issued the first device event starting at or
    after that time (by correlation), or None where the trace has no such event or no record of its launch."""
    dev = np.flatnonzero(t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0))
    dts = t.ts[dev]
    hl = np.flatnonzero((t.stream < 0) & (t.corr >= 0))
    hc, first = np.unique(t.corr[hl], return_index=True)
    hl = hl[first]

    def at(time: int):
        j = int(np.searchsorted(dts, time))
        if j >= len(dev) or not len(hc):
            return None
        c = t.corr[dev[j]]
        k = int(np.searchsorted(hc, c))
        if c < 0 or k >= len(hc) or hc[k] != c:
            return None
        return t.thread[hl[k]], t.ts[hl[k]]

    return at


def _unrecorded(t: RankTrace, i: int) -> int:
    """The longest stretch (ns) of op i with no child op or runtime call on its thread under it; 0 when it has no
    child (a leaf op's time is its own work). torchrec qcomm rank 2: a 21.7 ms `_AlltoAllSingle` holds 3 child
    events and 20.2 ms with none, host time no profiled op accounts for."""
    a, z = int(t.ts[i]), int(t.ts[i] + t.dur[i])
    kid = np.flatnonzero((t.thread == t.thread[i]) & (t.ts >= a) & (t.ts < z) & t.kind_mask(CPU_OP, RUNTIME))
    kid = kid[kid != i]
    if not len(kid):
        return 0
    s, e = iv.union(t.ts[kid], np.minimum(t.ts[kid] + t.dur[kid], z))
    edges = np.concatenate(([a], np.column_stack((s, e)).ravel(), [z]))
    return int((edges[1::2] - edges[0::2]).max())


def _stack(t: RankTrace, cand, cs, ce, ck, i: int) -> list[str]:
    """Names of the ops (and annotations) enclosing event i on its thread, innermost first."""
    enc = (t.thread[cand] == t.thread[i]) & (cs <= t.ts[i]) & (ce >= t.ts[i] + t.dur[i]) & (cand != i)
    enc &= (ck == CPU_OP) | (ck == ANNOTATION)
    idx = cand[enc]
    idx = idx[np.lexsort((-t.ts[idx], t.dur[idx]))][:STACK]
    return [t.names[n][:200] for n in t.name[idx].tolist()]


def alloc_steps(t: RankTrace, wins, steps, alloc: np.ndarray, is_alloc) -> list[AllocStep]:
    """Per step with any allocator call: calls (mallocs among them) and the device idle inside them. `alloc` is
    the mask of allocator runtime calls; `is_alloc(name)` tells an attributed op name apart."""
    if not wins:
        return []
    starts = np.array([w.start for w in wins], np.int64)
    ends = np.array([w.end for w in wins], np.int64)
    idx = np.flatnonzero(alloc)
    k = np.searchsorted(starts, t.ts[idx], side="right") - 1
    ok = (k >= 0) & (t.ts[idx] < ends[np.maximum(k, 0)])
    idx, k = idx[ok], k[ok]
    mal = t.name_mask(lambda n: "alloc" in n.lower(), alloc)[idx]
    calls = np.bincount(k, minlength=len(wins))
    mallocs = np.bincount(k[mal], minlength=len(wins)) if mal.any() else np.zeros(len(wins), np.int64)
    out = []
    for w, st, c, m in zip(wins, steps, calls.tolist(), mallocs.tolist()):
        ns = sum(iv.total(u) for cause, op, u in st.parts if cause == "runtime" and is_alloc(op))
        if c or ns:
            out.append(AllocStep(step=w.step, calls=int(c), mallocs=int(m), idle_ms=ns / NS_PER_MS))
    return out


MIN_OP_IDS = 50  # host ops below which the share says nothing (a capture of a few ops)
ID_STEP = 4  # ids between two recorded ops that still count as consecutive (a few go to events never written)
SAMPLED_SHARE = 0.9  # consecutive share below which the trace is event-sampled (complete captures: 0.98-1.0)


def op_ids_contiguous(t: RankTrace) -> float | None:
    """The share of recorded host ops whose next recorded op (by External id) follows within ID_STEP ids.
    Kineto numbers the ops it records in order, so a complete capture has 0.98-1.0 (one block of unexported
    ids, as a thread left out, is one break); an event-sampled trace leaves holes everywhere (hta/sampled_pair:
    0.62, 2,302 ops over 169,484 ids). None without the ids or with too few ops to tell."""
    ids = distinct(t.ext[(t.stream < 0) & (t.kind == CPU_OP) & (t.ext >= 0)])
    if len(ids) < MIN_OP_IDS:
        return None
    return float((np.diff(ids) <= ID_STEP).mean())
