"""DDP's gradient copies of one rank (model/ddp_copies.py), from its own events.

PyTorch's DDP reducer records `torch.distributed.ddp.reducer::copy_bucket_to_grad` around each copy of an
all-reduced bucket back into a gradient, and only in its `!gradient_as_bucket_view_` branch; during backward it
records `torch::distributed::reducer::mul_out` around each copy of a gradient into its bucket (with bucket views
the gradient is the bucket, and an in-place divide replaces that copy). Per step: those ops (inside the windows'
host spans), their host time (union), the device idle inside them (no device op of any stream running), and the
device ops launched by runtime calls on the op's thread inside it (matched by correlation id).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from llmdiag.diagnose.io.trace import ANNOTATION, CPU_OP, RUNTIME, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.optimizer_step import _in_windows, _inside
from llmdiag.diagnose.metrics.rank.sets import member
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.ddp_copies import DdpCopies
from llmdiag.diagnose.model.format import NS_PER_MS

BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
INTO = "torch::distributed::reducer::mul_out"
DDP_FORWARD = "DistributedDataParallel.forward"


def _launched(t: RankTrace, ops: np.ndarray) -> np.ndarray:
    """Device ops launched by runtime calls made inside `ops` on their thread (by correlation id)."""
    calls = _inside(t, ops, np.flatnonzero((t.stream < 0) & (t.kind == RUNTIME) & (t.corr >= 0)))
    dev = np.flatnonzero((t.stream >= 0) & (t.kind != ANNOTATION) & (t.corr >= 0))
    return dev[member(t.corr[dev], t.corr[calls])] if len(calls) else dev[:0]


def ddp_copies(t: RankTrace, wins: list[Window]) -> DdpCopies | None:
    if not wins or not t.is_gpu or t.kind is None:
        return None
    host = (t.stream < 0) & ((t.kind == CPU_OP) | (t.kind == ANNOTATION))
    back = _in_windows(t, np.flatnonzero(t.name_mask(lambda s: s == BACK, host)), wins)
    if not len(back):
        return None
    n = len(wins)
    dev = (t.stream >= 0) & (t.kind != ANNOTATION)
    busy = iv.union(t.ts[dev], t.ts[dev] + t.dur[dev])
    spans = iv.union(t.ts[back], t.ts[back] + t.dur[back])
    k = _launched(t, back)
    into = _in_windows(t, np.flatnonzero(t.name_mask(lambda s: s == INTO, host)), wins)
    ki = _launched(t, into) if len(into) else into
    fwd = _in_windows(t, np.flatnonzero(t.name_mask(lambda s: s == DDP_FORWARD, host)), wins)
    return DdpCopies(
        back_ops=len(back) / n, back_host_ms=iv.total(spans) / NS_PER_MS / n,
        back_idle_ms=(iv.total(spans) - iv.intersect_total(spans, busy)) / NS_PER_MS / n,
        back_device_ms=float(t.dur[k].sum()) / NS_PER_MS / n,
        back_copy=Counter(t.names[int(i)] for i in t.name[k]).most_common(1)[0][0][:120] if len(k) else "",
        into_ops=len(into) / n, into_device_ms=float(t.dur[ki].sum()) / NS_PER_MS / n, ddp_forward=bool(len(fwd)))
