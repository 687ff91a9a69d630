"""The optimizer step of one rank (model/optimizer.py), from its own events.

The `Optimizer.step#<Name>.step` host spans PyTorch records for every `torch.optim.Optimizer.step` (and for any
optimizer built on it: distributed Shampoo, EMA wrappers). Per optimizer: the union of its spans inside the
windows (host time), the device idle inside that union (no device op of any stream running: the union of kernels,
copies, memsets and collectives), and the device ops launched by runtime calls on the span's thread inside it
(matched by correlation id), their time and the collectives among them. The optimizer kept is the one whose spans
hold the most device idle; the others' host time is summed.

An event-sampled capture (hta/sampled_pair) drops kernels with their launch calls, so the idle read there is an
upper bound and the launches a lower bound; a span that is kept still has its exact length.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMM, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank import optimizer_kind as kind
from llmdiag.diagnose.metrics.rank.idle_stretch import SAMPLED_SHARE, op_ids_contiguous
from llmdiag.diagnose.metrics.rank.sets import distinct, median, member
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.optimizer import OptimizerStep
from llmdiag.diagnose.model.lazy_re import lazy_compile

STEP = re.compile(r"^Optimizer\.step#([^.#]{1,80})\.step")
MULTI = lazy_compile(r"^aten::_(foreach|fused)_|multi_tensor_apply|_fused_")


def _in_windows(t: RankTrace, idx: np.ndarray, wins: list[Window]) -> np.ndarray:
    starts = np.array([w.host_start for w in wins], np.int64)
    ends = np.array([w.host_end for w in wins], np.int64)
    k = np.searchsorted(starts, t.ts[idx], side="right") - 1
    return idx[(k >= 0) & (t.ts[idx] < ends[np.maximum(k, 0)])]


def _inside(t: RankTrace, outer: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Of `cand` (indices, sorted by ts), those starting inside one of `outer` on its thread."""
    cts = t.ts[cand]
    got = []
    for o in outer.tolist():
        a, b = np.searchsorted(cts, [t.ts[o], t.ts[o] + t.dur[o]])
        sel = cand[a:b]
        got.append(sel[t.thread[sel] == t.thread[o]])
    return distinct(np.concatenate(got)) if got else np.zeros(0, np.int64)


RECORD_IDLE_MS = 1.0  # below this much device idle per step inside the optimizer (rules/optimizer.py's floor), no record


def optimizer_step(t: RankTrace, wins: list[Window]) -> OptimizerStep | None:
    if not wins or not t.is_gpu or t.kind is None:
        return None
    host = (t.stream < 0) & ((t.kind == ANNOTATION) | (t.kind == CPU_OP))
    spans = _in_windows(t, np.flatnonzero(t.name_mask(lambda s: bool(STEP.match(s)), host)), wins)
    if not len(spans):
        return None
    by: dict[str, list[int]] = {}
    for i in spans.tolist():
        by.setdefault(t.names[int(t.name[i])], []).append(i)
    dev = (t.stream >= 0) & (t.kind != ANNOTATION)
    busy = iv.union(t.ts[dev], t.ts[dev] + t.dur[dev])
    n = len(wins)
    per: dict[str, tuple[int, int, np.ndarray]] = {}
    for name, got in by.items():
        arr = np.array(got, np.int64)
        u = iv.union(t.ts[arr], t.ts[arr] + t.dur[arr])
        per[name] = (iv.total(u), iv.total(u) - iv.intersect_total(u, busy), arr)
    op = max(per, key=lambda k: (per[k][1], per[k][0]))
    host_ns, idle_ns, ix = per[op]
    if idle_ns / NS_PER_MS / len(wins) < RECORD_IDLE_MS:
        return None  # nothing a rule could report: no record (summaries of many ranks keep their size budget)
    m = STEP.match(op)
    starts = np.array([w.host_start for w in wins], np.int64)
    held = distinct(np.searchsorted(starts, t.ts[ix], side="right") - 1)  # windows holding a span (_in_windows)
    o = OptimizerStep(op=op[:120], name=m.group(1) if m else op[:80], steps=len(held),
                      host_ms=host_ns / NS_PER_MS / n, idle_ms=idle_ns / NS_PER_MS / n,
                      others_ms=sum(v[0] for k, v in per.items() if k != op) / NS_PER_MS / n)
    calls = _inside(t, ix, np.flatnonzero((t.stream < 0) & (t.kind == RUNTIME) & (t.corr >= 0)))
    k = np.flatnonzero(dev & (t.corr >= 0))
    k = k[member(t.corr[k], t.corr[calls])] if len(calls) else k[:0]
    o.kernels = len(k) / n
    o.kernel_ms = float(t.dur[k].sum()) / NS_PER_MS / n
    o.kernel_median_us = median(t.dur[k]) / 1000 if len(k) else 0.0
    comm = k[t.kind[k] == COMM]
    o.comm_ms = float(t.dur[comm].sum()) / NS_PER_MS / n
    o.comm_name = t.names[int(t.name[comm[np.argmax(t.dur[comm])]])][:120] if len(comm) else ""
    # read from the kernels, not the ops: a `_foreach_*` op on its slow path (tensors of mixed dtype, device or
    # layout) launches one kernel per tensor, which the op's name does not say
    names = {t.names[int(j)] for j in distinct(t.name[k])}
    o.multi_tensor = any(MULTI.search(s[:200]) for s in names)
    ops = [t.names[int(t.name[j])] for j in _inside(t, ix, np.flatnonzero(host & (t.kind == CPU_OP))).tolist()]
    o.impl, o.foreach_ops = kind.impl(set(ops), names), kind.foreach_ops(ops) / n
    share = op_ids_contiguous(t)
    o.sampled = share is not None and share < SAMPLED_SHARE
    return o
