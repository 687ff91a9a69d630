"""Quantized-communication codecs: the device time of the kernels their encode and decode calls launch.

TorchRec's quantized comms (`QCommsConfig`) run each codec call inside a record_function range named
`## encoder <precision> <loss scale> ##` or `## decoder <precision> <loss scale> ##` (under `## codecs encode` /
`## codecs decode`). The kernels launched from inside those ranges, on the range's thread, are the codec's forward
cost: the casts (and clamps) to and from the wire precision. Their autograd backward runs later on the autograd
thread with no such range: it is not counted, so the numbers are a lower bound of what the codec costs.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, COMPUTE, MEMCPY, MEMSET, RankTrace
from llmdiag.diagnose.metrics.rank.launch_pairs import launch_calls
from llmdiag.diagnose.metrics.rank.sets import distinct
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.idle import CommCodec

CODEC_RE = re.compile(r"^## (encoder|decoder) (\S+)")


def comm_codec(t: RankTrace, wins) -> CommCodec | None:
    """Per window: device ms of the kernels launched inside the encoder and the decoder ranges, and the ranges'
    wire precision(s); None where no range of either kind starts in the windows."""
    if t.kind is None or not wins:
        return None
    ann = np.flatnonzero(t.name_mask(lambda n: CODEC_RE.match(n) is not None, (t.kind == ANNOTATION) & (t.stream < 0)))
    lo, hi = min(w.host_start for w in wins), max(w.host_end for w in wins)
    ann = ann[(t.ts[ann] >= lo) & (t.ts[ann] < hi)]
    if not len(ann):
        return None
    dev = np.flatnonzero((t.stream >= 0) & t.kind_mask(COMPUTE, MEMCPY, MEMSET))
    lc = launch_calls(t, dev)
    dev, lc = dev[lc >= 0], lc[lc >= 0]
    names = [t.names[n] for n in t.name[ann].tolist()]
    enc = np.array([CODEC_RE.match(n).group(1) == "encoder" for n in names])  # type: ignore[union-attr]
    ns = {True: 0, False: 0}
    for th in distinct(t.thread[ann]).tolist():
        mine = np.flatnonzero(t.thread[ann] == th)
        mine = mine[np.argsort(t.ts[ann[mine]], kind="stable")]
        starts, ends = t.ts[ann[mine]], t.ts[ann[mine]] + t.dur[ann[mine]]
        sel = t.thread[lc] == th
        at = t.ts[lc[sel]]
        k = np.searchsorted(starts, at, side="right") - 1
        inside = (k >= 0) & (at <= ends[np.maximum(k, 0)])
        d = t.dur[dev[sel]][inside]
        which = enc[mine[k[inside]]]
        ns[True] += int(d[which].sum())
        ns[False] += int(d[~which].sum())
    prec = sorted({CODEC_RE.match(n).group(2) for n in names})  # type: ignore[union-attr]
    n = len(wins)
    return CommCodec(precision=", ".join(prec)[:80], encode_ms_per_step=ns[True] / NS_PER_MS / n,
                     decode_ms_per_step=ns[False] / NS_PER_MS / n, calls_per_step=len(ann) / n)
