"""Quantized-communication codecs: the device time of their encode and decode kernels, forward and backward, and of
the collectives they encode.

TorchRec's quantized comms (`QCommsConfig`) run each codec call inside a record_function range named
`## encoder <precision> <loss scale> ##` or `## decoder <precision> <loss scale> ##`. Read from the trace:
- forward cost: the kernels launched inside those ranges, on the range's thread (the casts and clamps);
- encoded collectives, forward: the communication kernels launched on that thread between an encoder range's end
  and the next decoder range's start (the exchange the codec shrinks);
- backward: autograd runs the gradient of that chain on its own thread, unannotated. The exchange's backward is the
  autograd node that launches a communication kernel; the codec's gradients are the nodes right before and right
  after it whose names are the backward of an op the codec ranges ran (`aten::clamp` -> `ClampBackward1`,
  `aten::_to_copy` -> `ToCopyBackward0`): the gradient flows through them and the exchange in one chain, so the
  engine runs them back to back. Their kernels are the backward cost, the exchange's kernels the backward encoded
  collectives. Without autograd node names nothing is read there (the cost is then the forward's, a lower bound).
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMM, COMPUTE, CPU_OP, MEMCPY, MEMSET, RankTrace
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls
from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import CommCodec
from llmdiag.diagnose.model.lazy_re import lazy_compile

CODEC_RE = re.compile(r"^## (encoder|decoder) (\S+)")
NODE = "autograd::engine::evaluate_function: "
BACKWARD_RE = lazy_compile(r"^(?:\w+::)*(\w+?)Backward\d*$")


def _base(op: str) -> str:
    """`aten::_to_copy` -> "tocopy", `ToCopyBackward0` -> "tocopy": a forward op and its gradient node compare."""
    m = BACKWARD_RE.match(op)
    core = m.group(1) if m else op.rsplit("::", 1)[-1]
    return core.replace("_", "").lower()


def _inside(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per time in `at`: the index of the span (sorted by start, not nested) holding it, -1 where none."""
    k = np.searchsorted(starts, at, side="right") - 1
    ok = (k >= 0) & (at <= ends[np.maximum(k, 0)])
    return np.where(ok, k, -1)


def comm_codec(t: RankTrace, wins) -> CommCodec | None:
    """Per window: device ms of the codec's kernels (encode and decode ranges, and their gradient nodes), of the
    collectives it encodes, and the ranges' wire precision(s); None where no range of either kind starts in the
    windows."""
    if t.kind is None or not wins:
        return None
    ann = np.flatnonzero(t.name_mask(lambda n: CODEC_RE.match(n) is not None, (t.kind == ANNOTATION) & (t.stream < 0)))
    lo, hi = min(w.host_start for w in wins), max(w.host_end for w in wins)
    ann = ann[(t.ts[ann] >= lo) & (t.ts[ann] < hi)]
    if not len(ann):
        return None
    dev = np.flatnonzero((t.stream >= 0) & t.kind_mask(COMPUTE, MEMCPY, MEMSET, COMM))
    lc = launch_calls(t, dev)
    dev, lc = dev[lc >= 0], lc[lc >= 0]
    is_comm = t.kind[dev] == COMM
    names = [t.names[n] for n in t.name[ann].tolist()]
    enc = np.array([CODEC_RE.match(n).group(1) == "encoder" for n in names])  # type: ignore[union-attr]
    ns = {"encode": 0, "decode": 0, "backward": 0, "host": int(t.dur[ann].sum())}
    fwd_wire: list[tuple[int, int]] = []  # (launch ts, ns) of the encoded collectives' kernels, forward
    bases: set[str] = set()
    ops = np.flatnonzero((t.kind == CPU_OP) & (t.stream < 0) & (t.ts >= lo) & (t.ts < hi))
    for th in distinct(t.thread[ann]).tolist():
        mine = np.flatnonzero(t.thread[ann] == th)
        mine = mine[np.argsort(t.ts[ann[mine]], kind="stable")]
        starts, ends = t.ts[ann[mine]], t.ts[ann[mine]] + t.dur[ann[mine]]
        sel = t.thread[lc] == th
        k = _inside(starts, ends, t.ts[lc[sel]])
        d, c = t.dur[dev[sel]], is_comm[sel]
        which = enc[mine[np.maximum(k, 0)]]
        ns["encode"] += int(d[(k >= 0) & which & ~c].sum())
        ns["decode"] += int(d[(k >= 0) & ~which & ~c].sum())
        mo = ops[t.thread[ops] == th]
        bases |= {_base(t.names[n]) for n in t.name[mo[_inside(starts, ends, t.ts[mo]) >= 0]].tolist()}
        # between an encoder's end and the next range's start, when that range is a decoder
        gap_s, gap_e = ends[:-1], starts[1:]
        pair = enc[mine[:-1]] & ~enc[mine[1:]]
        at = t.ts[lc[sel]]
        g = _inside(gap_s, gap_e, at) if len(gap_s) else np.full(len(at), -1)
        hit = (g >= 0) & c & pair[np.maximum(g, 0)] if len(gap_s) else np.zeros(len(at), bool)
        fwd_wire += list(zip(at[hit].tolist(), d[hit].tolist()))
    bwd_wire = _backward(t, dev, lc, is_comm, bases, lo, hi, ns)
    prec = sorted({CODEC_RE.match(n).group(2) for n in names})  # type: ignore[union-attr]
    n = len(wins)
    per = lambda x: x / NS_PER_MS / n
    wire = sum(x for _, x in fwd_wire) + sum(x for _, x in bwd_wire)
    return CommCodec(precision=", ".join(prec)[:80], encode_ms_per_step=per(ns["encode"]),
                     decode_ms_per_step=per(ns["decode"]), calls_per_step=len(ann) / n,
                     backward_ms_per_step=per(ns["backward"]), wire_ms_per_step=per(wire),
                     wire_bytes_bound_ms_per_step=per(_paired(fwd_wire, bwd_wire, wins)),
                     wire_count_per_step=(len(fwd_wire) + len(bwd_wire)) / n, host_ms_per_step=per(ns["host"]))


def _backward(t: RankTrace, dev, lc, is_comm, bases: set[str], lo: int, hi: int, ns: dict) -> list[tuple[int, int]]:
    """The codec's gradient nodes' kernels (added to ns["backward"], their host time to ns["host"]) and the encoded collectives' backward kernels
    ((launch ts, ns) each): per thread, the autograd nodes in time order; a node launching communication with a
    codec gradient right before or after it is the exchange's backward."""
    nodes = np.flatnonzero(t.name_mask(lambda s: s.startswith(NODE), (t.stream < 0) & (t.ts >= lo) & (t.ts < hi)))
    out: list[tuple[int, int]] = []
    for th in distinct(t.thread[nodes]).tolist():
        mine = nodes[t.thread[nodes] == th]
        mine = mine[np.argsort(t.ts[mine], kind="stable")]
        top = np.ones(len(mine), bool)  # nested nodes (a node inside another) are not the chain's links
        e = t.ts[mine] + t.dur[mine]
        top[1:] = t.ts[mine[1:]] >= np.maximum.accumulate(e)[:-1]
        mine = mine[top]
        if not len(mine):
            continue
        codec = np.array([_base(t.names[n][len(NODE):]) in bases for n in t.name[mine].tolist()])
        sel = t.thread[lc] == th
        k = _inside(t.ts[mine], t.ts[mine] + t.dur[mine], t.ts[lc[sel]])
        comm_node = np.zeros(len(mine), bool)
        comm_node[k[(k >= 0) & is_comm[sel]]] = True
        used = np.zeros(len(mine), bool)
        for i in np.flatnonzero(comm_node & ~codec).tolist():
            j, run = i - 1, []
            while j >= 0 and codec[j]:
                run.append(j)
                j -= 1
            j = i + 1
            while j < len(mine) and codec[j]:
                run.append(j)
                j += 1
            if run:
                used[run] = True
                w = (k == i) & is_comm[sel]
                out += list(zip(t.ts[lc[sel]][w].tolist(), t.dur[dev[sel]][w].tolist()))
        own = (k >= 0) & used[np.maximum(k, 0)] & ~is_comm[sel]
        ns["backward"] += int(t.dur[dev[sel]][own].sum())
        ns["host"] += int(t.dur[mine[used]].sum())
    return out


def _paired(fwd: list[tuple[int, int]], bwd: list[tuple[int, int]], wins) -> int:
    """ns of the encoded collectives' time that can scale with their bytes: an exchange and its backward move the
    same bytes (a gradient has its tensor's shape), so where a window holds as many of each, the i-th forward pairs
    with the i-th last backward and each counts at the shorter of the two (the longer one's excess is not bytes:
    a wait, or contention with compute beside it); elsewhere each at its own time."""
    total = 0
    for w in wins:
        f = [d for ts, d in sorted(fwd) if w.host_start <= ts < w.host_end]
        b = [d for ts, d in sorted(bwd) if w.host_start <= ts < w.host_end][::-1]
        total += sum(2 * min(x, y) for x, y in zip(f, b)) if len(f) == len(b) else sum(f) + sum(b)
    return total
