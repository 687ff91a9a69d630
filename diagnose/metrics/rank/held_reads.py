"""Small device-to-host reads that held the host while queued device work drained (model/held_reads.py).

A read is a copy call (async-named or synchronous) whose own device copy goes device-to-host and ran while the host
was held: inside the call (it began after the call and before it returned), or inside the synchronize call that
came next on the call's thread (`.item()` as `cudaMemcpyAsync` + `cudaStreamSynchronize`: the copy began after the
sync did and ended before it returned, or up to SKEW_NS after: a device clock behind the host's). Its copy runs at most COPY_SHARE of the wait before it: the host waited on
the work queued ahead of the copy, not on the transfer. Per read: the hold (the holding call's start to the copy's
start), the recorded device activity inside it, the ops it drained (launched before the hold, started inside it),
and the device's starved idle after the copy (its next op launched after the holding call returned: the host,
held, could not queue it sooner). Grouped by call site (the call and the annotations around it). Linear in
events but for sorts.

A pageable host-to-device copy held in the synchronize after it (`aten::index` with a CPU index tensor:
`cudaMemcpyAsync` of `Memcpy HtoD (Pageable -> Device)`, then `cudaStreamSynchronize`) holds the host the same way
(the copy runs behind the queued work) and is counted too, marked `to_device`; one whose own call held the host is
the pageable_copy chore's. The refill (`refill_ms`): the device idle from each copy's end to the start of the first
op launched after the holding call returned, at most the hold (a host not held would have been that much earlier,
no more): the queue the hold drained, which the host, held, refilled late."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMM, CPU_OP, MEMCPY, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.host_wait import is_async_copy, is_sync_call
from llmdiag.diagnose.metrics.rank.sets import distinct, median  # np.unique/np.median without numpy.ma
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.held_reads import HeldReads, HeldSite

DTOH_RE = re.compile(r"DtoH|Device -> (Pageable|Pinned)|DeviceToHost|D2H", re.I)
HTOD_PAGEABLE_RE = re.compile(r"Pageable -> Device|HtoD \(Pageable", re.I)
COPY_SHARE = 0.1  # a copy running longer than this share of the wait before it is a transfer, not a read
MIN_HOLD_NS = 100_000  # holds shorter than 0.1 ms are not counted (a launch's own latency)
RECORD_MS = 1.0  # per step: below this no record
STACK = 4
MAX_SITED = 256  # reads whose enclosing ops are looked up (each a pass over the candidate ops)
# a copy may end this long after the synchronize that waited for it returned: the device clock behind the host's
# (torchrec sst_long_a2a_optimizer_5_qcomm rank 1: the pageable upload starts 9 µs after its 35-ms sync returned)
SKEW_NS = 50_000
REFILL_LOOKAHEAD = 4096  # device ops looked at after a read for the first one launched after it returned
OTHERS = 2  # other sites named beside the record's own


def _enclosing(t: RankTrace, cand: np.ndarray, call: int) -> list[str]:
    """Names of the host ops and annotations (`cand`) around the call on its thread, innermost first
    (ProfilerStep aside). Ops of equal span (`aten::to` and `aten::_to_copy`) may come in either order."""
    a, z = int(t.ts[call]), int(t.ts[call] + t.dur[call])
    i = cand[(t.thread[cand] == t.thread[call]) & (t.ts[cand] <= a) & (t.ts[cand] + t.dur[cand] >= z)]
    i = i[np.lexsort((-t.ts[i], t.dur[i]))]
    names = [t.names[int(n)][:120] for n in t.name[i].tolist()]
    return [n for n in names if not n.startswith("ProfilerStep#")][:STACK]


def _after_sync(t: RankTrace, calls: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per copy call that returned before its copy began, the synchronize call (`cudaStreamSynchronize`, ...) on its
    thread that came next after it and held the host until the copy had run (`.item()` as `cudaMemcpyAsync` +
    `cudaStreamSynchronize`): its index, or -1."""
    out = np.full(len(calls), -1, np.int64)
    sy = np.flatnonzero(t.name_mask(lambda x: bool(is_sync_call(x)) and "ynchronize" in x, np.asarray(t.kind == RUNTIME)))
    if not len(sy) or not len(calls):
        return out
    sy = sy[np.lexsort((t.ts[sy], t.thread[sy]))]
    for th in distinct(t.thread[calls]).tolist():
        mine = np.flatnonzero(t.thread[calls] == th)
        ss = sy[t.thread[sy] == th]
        if not len(ss):
            continue
        p = np.searchsorted(t.ts[ss], (t.ts + t.dur)[calls[mine]], side="left")
        ok = p < len(ss)
        s = ss[np.minimum(p, len(ss) - 1)]
        dm = d[mine]
        ok &= (t.ts[s] <= t.ts[dm]) & (t.ts[s] + t.dur[s] + SKEW_NS >= t.ts[dm] + t.dur[dm])
        out[mine[ok]] = s[ok]
    return out


def _refill(d_start: np.ndarray, d_launch: np.ndarray, busy, copy_end: int, returned: int) -> int:
    """ns of device idle (no op on any stream) from a copy's end to the start of the first op after it that was
    launched once the holding call returned (the work queued before it ran out meanwhile); 0 where none is
    within REFILL_LOOKAHEAD ops."""
    lo = int(np.searchsorted(d_start, copy_end, side="left"))
    later = np.flatnonzero(d_launch[lo:lo + REFILL_LOOKAHEAD] >= returned)
    if not len(later):
        return 0
    nxt = int(d_start[lo + int(later[0])])
    if nxt <= copy_end:
        return 0
    a, z = np.array([copy_end], np.int64), np.array([nxt], np.int64)
    return int(nxt - copy_end - iv.overlap_each(a, z, busy)[0])


def held_reads(t: RankTrace, wins: list[Window], calls_out: list[int] | None = None) -> HeldReads | None:
    """The site holding the host most (HeldReads); `calls_out`, where given, gets every read's holding call (event
    index, every site): the what-if that removes their waits (critical_path/held_read_sim.py)."""
    if not wins or not t.is_gpu or t.kind is None:
        return None
    run = np.flatnonzero(t.name_mask(lambda s: bool(is_async_copy(s) or is_sync_call(s)),
                                     (t.kind == RUNTIME) & (t.corr >= 0)))
    copies = (t.kind == MEMCPY) & (t.stream >= 0) & (t.corr >= 0)
    up = t.name_mask(lambda s: bool(HTOD_PAGEABLE_RE.search(s[:200])), copies)
    dev = np.flatnonzero(t.name_mask(lambda s: bool(DTOH_RE.search(s[:200])), copies) | up)
    rt = np.flatnonzero((t.kind == RUNTIME) & (t.corr >= 0))
    if not len(run) or not len(dev):
        return None
    dev = dev[np.argsort(t.corr[dev], kind="stable")]
    j = np.minimum(np.searchsorted(t.corr[dev], t.corr[run]), len(dev) - 1)
    run, d = run[t.corr[dev[j]] == t.corr[run]], dev[j][t.corr[dev[j]] == t.corr[run]]
    c_end = t.ts[run] + t.dur[run]
    # the host event that held it: the copy call itself (its copy began inside it), or the synchronize after it
    # a pageable upload held in its own call is the pageable_copy chore's: only one held in a sync after it
    inside = (t.ts[d] > t.ts[run]) & (t.ts[d] < c_end) & ~up[d]
    after = np.where(~inside & (t.ts[d] >= c_end), _after_sync(t, run, d), -1)
    waiter = np.where(inside, run, after)
    keep = waiter >= 0
    run, d, waiter = run[keep], d[keep], waiter[keep]
    hold = t.ts[d] - t.ts[waiter]
    ok = (hold >= MIN_HOLD_NS) & (t.dur[d] <= COPY_SHARE * hold)
    starts = np.array([w.host_start for w in wins], np.int64)
    ends = np.array([w.host_end for w in wins], np.int64)
    k = np.searchsorted(starts, t.ts[waiter], side="right") - 1
    ok &= (k >= 0) & (t.ts[waiter] < ends[np.maximum(k, 0)])
    if not ok.any():
        return None
    calls, d, k, wt = run[ok], d[ok], k[ok], waiter[ok]
    label = [t.names[int(t.name[c])][:60] + ("" if c == w else f" + {t.names[int(t.name[w])][:60]}")
             for c, w in zip(calls.tolist(), wt.tolist())]
    nw = len(wins)
    # device ops with their launch's start (correlation id), for the queue each read drained and the starvation after
    alld = np.flatnonzero((t.stream >= 0) & (t.kind != ANNOTATION))
    busy = iv.union(t.ts[alld], t.ts[alld] + t.dur[alld])
    rt = rt[np.argsort(t.corr[rt], kind="stable")]
    jj = np.minimum(np.searchsorted(t.corr[rt], t.corr[alld]), len(rt) - 1)
    launched = np.where(t.corr[rt[jj]] == t.corr[alld], t.ts[rt[jj]], np.iinfo(np.int64).min)
    o = np.argsort(t.ts[alld], kind="stable")
    d_start, d_launch = t.ts[alld][o], launched[o]
    held = (t.ts[d] - t.ts[wt]).astype(np.int64)
    # an op around a held call lasts at least its hold: only those are candidates; the MAX_SITED longest holds
    # are placed by their stack, the rest by their call's name alone
    cand = np.flatnonzero(t.kind_mask(CPU_OP, ANNOTATION) & (t.dur >= int(held.min())))
    sited = set(np.argsort(-held, kind="stable")[:MAX_SITED].tolist())
    sites: dict[tuple, list[int]] = defaultdict(list)
    stacks: dict[int, list[str]] = {}
    ann = {t.names[int(n)] for n in distinct(t.name[t.kind == ANNOTATION]).tolist()}
    for n, w in enumerate(wt.tolist()):
        stacks[n] = _enclosing(t, cand, w) if n in sited else []
        # a site: the call and the annotations around it (the ops' order between equal spans is not stable)
        sites[(label[n], tuple(x for x in stacks[n] if x in ann), bool(up[d[n]]))].append(n)
    # at most the hold: a host not held would have reached its next launch that much sooner, no more
    refill = np.minimum(held, np.array([_refill(d_start, d_launch, busy, int(t.ts[x] + t.dur[x]),
                                                int(t.ts[w] + t.dur[w])) for x, w in zip(d.tolist(), wt.tolist())],
                                       np.int64))
    order = sorted(sites.items(), key=lambda kv: -int(held[kv[1]].sum()))
    key, idx = order[0]
    ix = np.asarray(idx)
    longest = int(ix[np.argmax(held[ix])])
    c, dd = wt[ix], d[ix]
    b = iv.overlap_each(t.ts[c], t.ts[dd], busy)
    cm = np.flatnonzero((t.kind == COMM) & (t.stream >= 0))
    b_comm = iv.overlap_each(t.ts[c], t.ts[dd], iv.union(t.ts[cm], t.ts[cm] + t.dur[cm]))
    queued, starved = 0, 0
    for ci, di in zip(c.tolist(), dd.tolist()):
        a, s = int(t.ts[ci]), int(t.ts[di])
        lo, hi = np.searchsorted(d_start, a, side="right"), np.searchsorted(d_start, s, side="left")
        queued = max(queued, int((d_launch[lo:hi] < a).sum()))
        e = int(t.ts[di] + t.dur[di])
        nx = np.searchsorted(d_start, e, side="left")
        covered = iv.overlap_each(np.array([e], np.int64), np.array([e + 1], np.int64), busy)[0] > 0
        if nx < len(d_start) and not covered and d_launch[nx] >= int(t.ts[ci] + t.dur[ci]):
            starved += int(d_start[nx]) - e
    nb = [x for x in (t.comm_args.get(int(i), {}).get("bytes") for i in dd.tolist()) if isinstance(x, int)]
    tot_held = float(held.sum()) / NS_PER_MS / nw
    if tot_held < RECORD_MS:
        return None
    host_span = float((ends - starts).sum()) / NS_PER_MS / nw
    if calls_out is not None:
        calls_out.extend(wt.tolist())
    return HeldReads(
        call=key[0], copy=t.names[int(t.name[dd[0]])][:80], stack=stacks[longest], calls=len(ix) / nw,
        held_ms=float(held[ix].sum()) / NS_PER_MS / nw, copy_us=median(t.dur[dd]) / 1e3,
        copy_bytes=int(median(nb)) if nb else None,
        busy_ms=float(b.sum()) / NS_PER_MS / nw, comm_ms=float(b_comm.sum()) / NS_PER_MS / nw, queued=queued, starved_ms=starved / NS_PER_MS / nw,
        host_rest_ms=host_span - tot_held, steps=len(set(k[ix].tolist())), all_sites_ms=tot_held,
        longest_ms=float(held[longest]) / NS_PER_MS, longest_step=wins[int(k[longest])].step,
        refill_ms=float(refill[ix].sum()) / NS_PER_MS / nw, all_refill_ms=float(refill.sum()) / NS_PER_MS / nw,
        to_device=key[2], others=[
            HeldSite(call=k2[0], stack=list(k2[1]), held_ms=float(held[i2].sum()) / NS_PER_MS / nw,
                     refill_ms=float(refill[i2].sum()) / NS_PER_MS / nw, to_device=k2[2])
            for k2, i2 in order[1:1 + OTHERS]])
