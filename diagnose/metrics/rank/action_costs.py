"""What a rank's trace says about the cost of one pipeline action beyond its compute, for the what-if
prediction (diagnose.simulate.predict), read in the per-rank job (the trace is there; only small lists leave it).

`action_fixed_ns`: the part of each action that does not shrink with the microbatch (CPU traces): the time
inside the action covered by no op (Python between ops), the ops that move no data (views, transposes,
`empty`: their cost is dispatch alone), the self time of the autograd engine's own ops (`autograd::engine::
evaluate_function: …`, the `…Backward0` nodes, `AccumulateGrad`: their tensor work is in the aten ops they
call, what is left is bookkeeping per node), and one dispatch overhead per other op, the overhead being the
median self time of the leaf view-like ops of the trace (an op that does no work costs that much to run).
GPU traces: the action's device span not covered by its compute kernels (launch gaps).

`host_p2p`: gloo's `gloo:send`/`gloo:recv` spans (from the `c10d::send`/`c10d::recv_` call that posts them to
completion) with their message bytes from the
span's `Input Dims` and `Input type`: the transfers of CPU pipeline runs, whose send/recv carry no peer.
"""

from __future__ import annotations

import math

import numpy as np

from llmdiag.diagnose.io.trace import COMPUTE, RankTrace
from llmdiag.diagnose.model.dtypes import element_bytes
from llmdiag.diagnose.model.lazy_re import lazy_compile

VIEW_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::as_strided", "aten::transpose", "aten::t",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::narrow",
    "aten::select", "aten::detach", "detach", "aten::alias", "aten::split", "aten::chunk", "aten::unbind",
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::result_type", "aten::resolve_conj",
    "aten::resolve_neg", "aten::lift_fresh", "aten::contiguous", "aten::view_as", "aten::expand_as",
})
_NODE = lazy_compile(r"Backward\d*$")
HostP2P = tuple[str, int, int, int]  # (send|recv, start ns, end ns, bytes), rank-relative


def action_fixed_ns(t: RankTrace, actions) -> list[int]:
    """Per action (same order), its size-independent time in ns; [] without the ops to read it from."""
    if not actions:
        return []
    if t.is_gpu:
        return _device_gaps(t, actions)
    if "cpu_op" not in t.cats:
        return []
    ops = np.flatnonzero((t.cat == t.cats.index("cpu_op")) & (t.stream < 0))
    if not len(ops):
        return []
    from llmdiag.diagnose.metrics.rank.op_scaling import GEMM_2D, fit_gemms, gemm_shape  # CPU pipelines only

    ts, end = t.ts[ops], t.ts[ops] + t.dur[ops]
    view = np.isin(t.name[ops], t.name_ids(VIEW_OPS.__contains__))  # each distinct name looked at once
    node = np.isin(t.name[ops], t.name_ids(is_autograd_node))
    gemm = np.isin(t.name[ops], t.name_ids(GEMM_2D.__contains__))
    overhead = _dispatch_ns(ts, end, view)
    inside, samples = [], []
    for a in actions:
        lo, hi = np.searchsorted(ts, a.start, "left"), np.searchsorted(ts, a.end, "right")
        sel = np.arange(lo, hi)[end[lo:hi] <= a.end]
        own = _self_times(ts[sel], end[sel])
        shapes = {int(i): sh for i in sel[gemm[sel]].tolist()
                  if (sh := gemm_shape(t.names[t.name[ops[i]]], t.comm_args.get(int(ops[i]), {}).get("Input Dims")))}
        samples += [(sh, int(own[k])) for k, i in enumerate(sel.tolist()) if (sh := shapes.get(i))]
        inside.append((sel, own, shapes))
    fit = fit_gemms(samples)
    out = []
    for a, (sel, own, shapes) in zip(actions, inside):
        if not len(sel):
            out.append(0)
            continue
        covered, views, last, vopen = 0, 0, -1, -1
        for i in sel.tolist():  # ops in start order: an op starting before the open top op's end is nested
            if ts[i] >= last:
                covered += int(end[i] - ts[i])
                last = int(end[i])
            if view[i] and ts[i] >= vopen:  # outermost view-like ops only (as_strided nests in transpose)
                views += int(end[i] - ts[i])
                vopen = int(end[i])
        fitted = 0.0
        if fit is not None:  # GEMMs with a shape: the fitted fixed share of their own time, no dispatch extra
            for k, i in enumerate(sel.tolist()):
                if i in shapes:
                    fitted += fit.fixed_share(shapes[i]) * int(own[k])
        n_other = int((~view[sel] & ~node[sel]).sum()) - (len(shapes) if fit is not None else 0)
        gap = max(int(a.end - a.start) - covered, 0)
        book = int(own[node[sel]].sum())
        out.append(min(gap + views + book + int(fitted) + n_other * overhead, int(a.end - a.start)))
    return out


def is_autograd_node(name: str) -> bool:
    """The autograd engine's own ops: their children are the aten ops doing the tensor work."""
    return not name.startswith("aten::") and (name.startswith("autograd::") or name == "torch::autograd::AccumulateGrad"
                                              or bool(_NODE.search(name)))


def _self_times(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per op (in start order) its self time: span − its direct children's spans (an op starting before the
    open op's end is nested in it)."""
    own = (end - ts).astype(np.int64)
    stack: list[int] = []
    for k, (s0, e0) in enumerate(zip(ts.tolist(), end.tolist())):
        while stack and s0 >= end[stack[-1]]:
            stack.pop()
        if stack:
            own[stack[-1]] -= e0 - s0
        stack.append(k)
    return own


def _device_gaps(t: RankTrace, actions) -> list[int]:
    """GPU actions: the device span not covered by its compute kernels (launch gaps: the host not keeping
    the device fed, a cost per action, not per sample)."""
    k = np.flatnonzero((t.stream >= 0) & (t.kind == COMPUTE)) if t.kind is not None else np.array([], int)
    ts, end = t.ts[k], t.ts[k] + t.dur[k]
    out = []
    for a in actions:
        lo, hi = np.searchsorted(ts, a.start, "left"), np.searchsorted(ts, a.end, "left")
        covered, last = 0, a.start
        for s0, e0 in zip(ts[lo:hi].tolist(), np.minimum(end[lo:hi], a.end).tolist()):
            if e0 > last:
                covered += e0 - max(s0, last)
                last = e0
        out.append(int(a.end - a.start - covered) if covered else 0)
    return out


def _dispatch_ns(ts: np.ndarray, end: np.ndarray, view: np.ndarray) -> int:
    """Median duration of leaf view-like ops (no op starts inside them): the cost of running an op that does
    no work."""
    nxt = np.append(ts[1:], np.iinfo(np.int64).max)
    leaf = view & (nxt >= end)
    return int(np.median(end[leaf] - ts[leaf])) if leaf.any() else 0


def host_p2p(t: RankTrace) -> list[HostP2P]:
    """gloo's send/recv spans with their bytes, in start order (empty where the trace has none)."""
    want = {k: n for k, n in enumerate(t.names) if n in ("c10d::send", "c10d::recv_", "gloo:send", "gloo:recv")}
    if not any(n.startswith("gloo:") for n in want.values()):
        return []
    out, posted = [], {}
    for i in np.flatnonzero(np.isin(t.name, list(want)) & (t.stream < 0)).tolist():
        name = want[int(t.name[i])]
        if name.startswith("c10d::"):  # the host call that posts the message (gloo's span opens after it)
            posted[name[6:10]] = int(t.ts[i])
            continue
        a = t.comm_args.get(i, {})
        dims, types = a.get("Input Dims") or [], a.get("Input type") or []
        nbytes = 0
        for k, d in enumerate(dims):
            if isinstance(d, list) and all(isinstance(x, int) for x in d):
                nbytes += math.prod(d) * ((element_bytes(types[k]) if k < len(types) else None) or 4)
        start = min(posted.pop(name[5:9], int(t.ts[i])), int(t.ts[i]))
        out.append((name[5:], start, int(t.ts[i] + t.dur[i]), nbytes))
    return sorted(out, key=lambda r: (r[1], r[2]))
