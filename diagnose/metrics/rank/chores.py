"""Per-step chores of one rank and what its capture is (model/chores.py), from its own events.

- zero_grad: `Optimizer.zero_grad#...` host ops and the launch calls made inside them. With
  `set_to_none=False` (PyTorch < 2.0's default) zeroing launches one fill/memset per parameter; with
  `set_to_none=True` it launches nothing, so launches inside the op are the evidence.
- pageable copies: device copies whose name says pageable host memory (`Memcpy HtoD (Pageable -> Device)`),
  their runtime calls (by correlation id), and the device idle from each call's start to the device's next op
  after the call returned: the host is held in a pageable copy until it is staged, so the work it would have
  queued meanwhile is not queued.
- buffer broadcast: broadcast collectives recorded inside `DistributedDataParallel.forward` (DDP's
  `broadcast_buffers=True` broadcasts the module's buffers from rank 0 every forward), with the pack/unpack ops
  around them (`aten::flatten_dense_tensors`, `aten::unflatten_dense_tensors`) on the same thread.
- metadata ops: `aten::view`-like ops do no data work; their fastest call is the host's floor per op.
- sampling: the External-id contiguity of the host ops (metrics/rank/idle_stretch.py).
- embedding lookups: TBE / EmbeddingBag kernels' device time.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, CPU_OP, MEMCPY, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.idle_stretch import SAMPLED_SHARE, op_ids_contiguous
from llmdiag.diagnose.metrics.rank.sets import median, member
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.chores import META_MIN_CALLS, META_SLOW_US, RankChores
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.lazy_re import lazy_compile

ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#")
LAUNCH = lazy_compile(r"LaunchKernel|Memset|cuLaunch|hipExtModuleLaunch|ModuleLaunch")
DDP_FORWARD = "DistributedDataParallel.forward"
PACK = ("aten::flatten_dense_tensors", "aten::unflatten_dense_tensors", "c10d::broadcast_")
META_OPS = ("aten::view", "aten::as_strided", "aten::_reshape_alias", "aten::alias")
# sharded-embedding lookups: FBGEMM's table-batched embeddings (TorchRec) and EmbeddingBag; not nn.Embedding's
# gather/scatter (`embedding_backward_feature_kernel`), which a data-parallel model runs alike on every rank
LOOKUP = re.compile(r"split_embedding|batched_embedding|embedding_bag|EmbeddingBag")


class _Busy:
    """The union of device activity (kernels, copies, memsets, collectives; not GPU-side annotations), built
    once and only where a chore needs it."""

    def __init__(self, t: RankTrace):
        self.t = t
        self._u: iv.Union | None = None

    @property
    def u(self) -> iv.Union:
        if self._u is None:
            m = (self.t.stream >= 0) & (self.t.kind != ANNOTATION)
            self._u = iv.union(self.t.ts[m], self.t.ts[m] + self.t.dur[m])
        return self._u


def _in_host(t: RankTrace, mask: np.ndarray, wins: list[Window]) -> np.ndarray:
    """Events of `mask` that start inside a window's host span."""
    if not wins:
        return np.zeros(len(t), bool)
    starts = np.array([w.host_start for w in wins], np.int64)
    ends = np.array([w.host_end for w in wins], np.int64)
    k = np.searchsorted(starts, t.ts, side="right") - 1
    return mask & (k >= 0) & (t.ts < ends[np.maximum(k, 0)])


def _idle_in(spans: iv.Union, busy: _Busy) -> int:
    return iv.total(spans) - iv.intersect_total(spans, busy.u)


def _inside(t: RankTrace, outer: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Events of `mask` that start inside one of the `outer` events on the same thread (outer: indices)."""
    out = np.zeros(len(t), bool)
    cand = np.flatnonzero(mask)
    cts = t.ts[cand]  # sorted by ts (the columns are)
    for o in outer.tolist():
        lo, hi, th = t.ts[o], t.ts[o] + t.dur[o], t.thread[o]
        a, b = np.searchsorted(cts, [lo, hi])
        sel = cand[a:b]
        out[sel[t.thread[sel] == th]] = True
    return out


def rank_chores(t: RankTrace, wins: list[Window]) -> RankChores | None:
    if not wins or not t.is_gpu or t.kind is None:
        return None
    n = len(wins)
    share = op_ids_contiguous(t)
    c = RankChores(sampled_share=share if share is not None and share < SAMPLED_SHARE else None)
    busy = _Busy(t)
    host = t.stream < 0
    ops = _in_host(t, host & (t.kind == CPU_OP), wins)
    _zero_grad(t, c, busy, ops, n)
    _pageable(t, c, busy, wins, n)
    _buffers(t, c, busy, wins, n)
    _meta(t, c, ops)
    _lookups(t, c, wins, n)
    return None if c == QUIET else c


QUIET = RankChores(sampled_share=None)  # nothing to say: summaries of 16k ranks do not carry an empty record each


def _zero_grad(t: RankTrace, c: RankChores, busy: _Busy, ops: np.ndarray, n: int) -> None:
    zg = np.flatnonzero(t.name_mask(lambda s: bool(ZERO_GRAD.match(s)), ops))
    if not len(zg):
        return
    spans = iv.union(t.ts[zg], t.ts[zg] + t.dur[zg])
    c.zero_grad_op = t.names[int(t.name[zg[0]])][:120]
    c.zero_grad_ms = iv.total(spans) / NS_PER_MS / n
    launches = t.name_mask(lambda s: bool(LAUNCH.search(s[:200])), (t.stream < 0) & (t.kind == RUNTIME))
    c.zero_grad_launches = float(_inside(t, zg, launches).sum()) / n
    c.zero_grad_idle_ms = _idle_in(spans, busy) / NS_PER_MS / n


def _pageable(t: RankTrace, c: RankChores, busy: _Busy, wins: list[Window], n: int) -> None:
    """Host-to-device copies from pageable memory (a device-to-host copy the host reads anyway: host_sync's)."""
    dev = t.name_mask(lambda s: "Pageable -> Device" in s[:200] or ("HtoD" in s[:200] and "Pageable" in s[:200]),
                      (t.kind == MEMCPY) & (t.stream >= 0) & (t.corr >= 0))
    calls = (t.stream < 0) & (t.kind == RUNTIME) & (t.corr >= 0)
    calls[calls] = member(t.corr[calls], t.corr[dev])
    calls = _in_host(t, calls, wins)
    if not calls.any():
        return
    ci = np.flatnonzero(calls)
    di = np.flatnonzero(dev)
    di = di[member(t.corr[di], t.corr[ci])]
    c.pageable_copies = len(di) / n
    c.pageable_device_ms = float(t.dur[di].sum()) / NS_PER_MS / n
    c.pageable_call_ms = float(t.dur[ci].sum()) / NS_PER_MS / n
    c.pageable_name = Counter(t.names[int(i)] for i in t.name[di]).most_common(1)[0][0][:120] if len(di) else ""
    # The idle the blocking causes: the host held in the call queued nothing meanwhile, so it resumes with no
    # lead over the device; the device idle in the call's length after the copy ends is what that lost lead
    # can leave (a non-blocking copy keeps the host ahead by up to the call's time). Idle before the copy
    # starts is the queue's (work ahead of the copy), not the call's.
    end_of = dict(zip(t.corr[di].tolist(), (t.ts[di] + t.dur[di]).tolist()))
    gaps = []
    for i in ci.tolist():
        done = int(end_of.get(int(t.corr[i]), int(t.ts[i] + t.dur[i])))
        span = iv.union(np.array([done], np.int64), np.array([done + int(t.dur[i])], np.int64))
        gaps.append(_idle_in(span, busy))
    c.pageable_idle_ms = float(sum(gaps)) / NS_PER_MS / n


def _buffers(t: RankTrace, c: RankChores, busy: _Busy, wins: list[Window], n: int) -> None:
    fwd = np.flatnonzero(_in_host(t, t.name_mask(lambda s: s == DDP_FORWARD, t.stream < 0), wins))
    if not len(fwd):
        return
    bc = np.zeros(len(t), bool)
    for i, a in t.comm_args.items():
        if t.stream[i] < 0 and str(a.get("Collective name", "")).lower() == "broadcast":
            bc[i] = True
    inside = _inside_any(t, fwd, bc)
    if not inside.any():
        return
    elems: Counter = Counter()
    for i in np.flatnonzero(inside).tolist():
        a = t.comm_args[i]
        try:
            elems[str(a.get("dtype", "?"))[:20]] += int(a.get("In msg nelems") or 0)
        except (TypeError, ValueError):
            pass
    c.buffer_bcasts = float(inside.sum()) / n
    c.buffer_elems = " + ".join(f"{v // n} {k}" for k, v in elems.most_common(4))
    pack = _inside_any(t, fwd, t.name_mask(lambda s: s in PACK, (t.stream < 0) & (t.kind == CPU_OP)))
    pi = np.flatnonzero(pack)
    spans = iv.union(t.ts[pi], t.ts[pi] + t.dur[pi])
    c.buffer_host_ms = iv.total(spans) / NS_PER_MS / n
    c.buffer_idle_ms = _idle_in(spans, busy) / NS_PER_MS / n


def _inside_any(t: RankTrace, outer: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Events of `mask` that start inside one of the `outer` spans (any thread: DDP's annotation and its ops may
    sit on different host threads of one process)."""
    out = np.zeros(len(t), bool)
    cand = np.flatnonzero(mask)
    cts = t.ts[cand]
    for o in outer.tolist():
        a, b = np.searchsorted(cts, [t.ts[o], t.ts[o] + t.dur[o]])
        out[cand[a:b]] = True
    return out


def _meta(t: RankTrace, c: RankChores, ops: np.ndarray) -> None:
    m = t.name_mask(lambda s: s in META_OPS, ops)
    if m.sum() < META_MIN_CALLS:  # too few calls to read the host's floor from
        return
    d = t.dur[m] / 1000.0
    if d.min() < META_SLOW_US:  # a healthy floor: nothing to report (rules/capture.py)
        return
    c.meta_calls = int(m.sum())
    c.meta_min_us = float(d.min())
    c.meta_median_us = median(d)  # np.median's value, without its numpy.ma import (~8 ms)
    c.meta_op = Counter(t.names[int(i)] for i in t.name[m]).most_common(1)[0][0]


def _lookups(t: RankTrace, c: RankChores, wins: list[Window], n: int) -> None:
    from llmdiag.diagnose.metrics.rank.overlap import in_windows

    k = in_windows(t, t.name_mask(lambda s: bool(LOOKUP.search(s[:300])), (t.stream >= 0) & (t.kind != ANNOTATION)), wins)
    if not k.any():
        return
    idx = np.flatnonzero(k)
    c.lookup_ms = float(t.dur[idx].sum()) / NS_PER_MS / n
    c.lookup_kernels = len(idx) / n
    by: Counter = Counter()
    for i in idx.tolist():
        by[int(t.name[i])] += int(t.dur[i])
    top, ns = by.most_common(1)[0]
    c.lookup_top, c.lookup_top_ms = t.names[top][:200], ns / NS_PER_MS / n
