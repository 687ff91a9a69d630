"""Host-thread stalls inside and just before the host ops that launch collectives.

A straggler whose device idle shows nothing (its GPU still ran queued or side-stream work) can still arrive late
at a collective because the host thread that launches it stalled: inside the collective's op with no child
event, or before it with no event at all on that thread. The autograd engine's thread launches the backward's
collectives, so every thread counts. Read along the rank's own events: each communication kernel's launch call
(correlation) -> the host ops enclosing that call on its thread (the collective's op and the ops around it) ->
the longest stretch of any of them, up to the launch, with no event under it: inside the collective's op, or
just before it (a stretch of the op around it). Each op counts once; stretches under MIN_NS are dispatch.

Annotations (record_function ranges: the step's `ProfilerStep#N`, TorchRec's `## forward ##`) do not make an op
nested: the outermost op enclosing a launch is found among ops. Where no op encloses that op, the stretch just
before it counts too when a user annotation other than the step's encloses both (the thread stalls inside the
annotated region that issues the collective: torchrec sst_long_a2a rank 2's 20.2 ms in `# running sparse arch`
right before its forward `_AlltoAllSingle`, its device idle 18.3 ms of it); a stretch with only the step's
annotation around it is a process stall between regions (the stragglers rule's "no profiled host op").
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMM, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls
from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import HostStall

MIN_NS = 1_000_000  # 1 ms


def comm_host_stall(t: RankTrace, wins) -> HostStall | None:
    """Mean per window of the stalls (inside + before, each ≥ MIN_NS) of the collective ops launched in the
    windows, with the op and thread holding the most; None without communication kernels or launches."""
    kind = t.kind
    if kind is None or not wins:
        return None
    comm = np.flatnonzero((kind == COMM) & (t.stream >= 0))
    if not len(comm):
        return None
    lc = launch_calls(t, comm)
    lo, hi = min(w.host_start for w in wins), max(w.host_end for w in wins)
    lc = distinct(lc[lc >= 0])
    lc = lc[(t.ts[lc] >= lo) & (t.ts[lc] <= hi)]
    if not len(lc):
        return None
    host = (t.stream < 0) & t.kind_mask(CPU_OP, RUNTIME, ANNOTATION)
    region = t.name_mask(lambda n: not n.startswith("ProfilerStep#"), (kind == ANNOTATION) & (t.stream < 0))
    by_op: dict[tuple[int, int], list[int]] = {}
    seen: set[tuple] = set()
    low = np.iinfo(np.int64).min
    for th in distinct(t.thread[lc]).tolist():
        ev = np.flatnonzero(host & (t.thread == th))  # in start order
        es, ee = t.ts[ev], t.ts[ev] + t.dur[ev]
        ann = kind[ev] == ANNOTATION
        reach = np.maximum.accumulate(np.where(ann, low, ee))  # how far the non-annotation events up to each reach
        ops = kind[ev] == CPU_OP
        top = ops & (es >= np.concatenate(([low], reach[:-1])))  # starts after every op/call before it ends
        tpos = np.flatnonzero(top)
        apos = np.flatnonzero(region[ev])  # the thread's user annotations (not the step's), in start order
        for c in lc[t.thread[lc] == th].tolist():
            k = int(np.searchsorted(es[tpos], t.ts[c], side="right")) - 1
            if k < 0 or ee[tpos[k]] < t.ts[c] + t.dur[c]:
                continue  # no op encloses the launch: a bare launch
            pc = int(np.searchsorted(es, t.ts[c], side="left"))  # the launch's position among the thread's events
            chain = tpos[k] + np.flatnonzero(ops[tpos[k]:pc] & (ee[tpos[k]:pc] >= t.ts[c] + t.dur[c]))
            best, at = 0, -1
            for q in chain.tolist():  # each enclosing op: its longest stretch with no event under it, up to the launch
                if (th, q) in seen:
                    continue
                seen.add((th, q))
                g = _inside(es, ee, q, pc, int(t.ts[c]))
                if g > best:
                    best, at = g, q
            q = int(tpos[k])
            if ("before", th, q) not in seen:  # the stretch just before the outermost op, inside a user region
                seen.add(("before", th, q))
                g, a = _before(es, ee, reach, apos, q, ann)
                if g > best:
                    best, at = g, a
            if best >= MIN_NS:
                by_op.setdefault((int(t.name[ev[at]]), int(th)), []).append(best)
    if not by_op:
        return HostStall(ms_per_step=0.0)
    ranked = sorted(by_op.items(), key=lambda kv: -sum(kv[1]))
    (name, th), v = ranked[0]
    tot = sum(sum(x) for x in by_op.values())
    out = HostStall(ms_per_step=tot / NS_PER_MS / len(wins), op=t.names[name][:200], thread=_thread(t, th),
                    op_ms_per_step=sum(v) / NS_PER_MS / len(wins))
    if len(ranked) > 1:  # the next: a straggler's forward and backward halves sit on two threads
        (name, th), v = ranked[1]
        out.next_op, out.next_thread = t.names[name][:200], _thread(t, th)
        out.next_ms_per_step = sum(v) / NS_PER_MS / len(wins)
    return out


def _thread(t: RankTrace, th: int) -> str:
    return str(t.thread_names.get(th) or f"tid {t.threads[th][1]}")[:80]


def _inside(es: np.ndarray, ee: np.ndarray, q: int, pc: int, until: int) -> int:
    """The longest stretch of the thread's op q, up to `until` (the launch), with no event starting under it
    (events q+1 .. pc-1 are those starting in it before the launch)."""
    a, z = int(es[q]), min(int(ee[q]), until)
    if pc <= q + 1:
        return z - a
    s, e = es[q + 1:pc], np.maximum.accumulate(np.minimum(ee[q + 1:pc], z))
    edges = np.concatenate(([a], np.column_stack((s, e)).ravel(), [z]))
    return int(np.maximum(edges[1::2] - edges[0::2], 0).max())


BACK = 16  # annotations looked back over for the one around an op (nested regions are few)


def _before(es: np.ndarray, ee: np.ndarray, reach: np.ndarray, apos: np.ndarray, q: int, ann: np.ndarray
            ) -> tuple[int, int]:
    """(the stretch just before op q and its short prologue with no op or call in it, the innermost user annotation
    enclosing both): from the later of that annotation's start and the end of the thread's last op/call before
    them, to the prologue's start; (0, -1) where no user annotation encloses q. The prologue (_prologue) is the
    exchange's own preparation right before its op: TorchRec's quantized-comm encode (`## encoder fp16 ##`, its
    casts) sits between the stall and the `_AlltoAllSingle`."""
    s, i = _prologue(es, reach, ann, q)
    j = int(np.searchsorted(apos, q)) - 1
    for k in range(j, max(j - BACK, -1), -1):
        p = int(apos[k])
        if ee[p] >= ee[q] and es[p] <= s:
            prev = int(reach[i]) if i >= 0 else int(es[p])
            return max(0, s - max(prev, int(es[p]))), p
    return 0, -1


TOUCH_NS = 200_000  # host work this close to the next is one burst (Python between the codec's calls: up to ~70 us)
PROLOGUE_NS = 1_000_000  # a burst longer than this before the op is work of its own, not the exchange's preparation
PROLOGUE_EVENTS = 256  # events looked back over


def _prologue(es: np.ndarray, reach: np.ndarray, ann: np.ndarray, q: int) -> tuple[int, int]:
    """(the start of the burst of host ops and calls that runs right up to op q, each within TOUCH_NS of the next,
    the index of the last event before it): q's own start and q - 1 where there is none, or where the burst is
    longer than PROLOGUE_NS (an op that began long before and reaches q is no prologue)."""
    s, i = int(es[q]), q - 1
    while i >= 0 and q - i <= PROLOGUE_EVENTS:
        if not ann[i]:
            if int(reach[i]) < s - TOUCH_NS:
                break
            s = min(s, int(es[i]))
            if int(es[q]) - s > PROLOGUE_NS:
                return int(es[q]), q - 1
        i -= 1
    return (s, i) if q - i <= PROLOGUE_EVENTS else (int(es[q]), q - 1)
