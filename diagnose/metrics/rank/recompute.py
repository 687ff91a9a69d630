"""Activation checkpointing's recomputation of one rank (model/recompute.py), from its own events.

Non-reentrant `torch.utils.checkpoint` (the default, and `checkpoint_wrapper`'s) saves no activations of a
checkpointed segment; in backward the first unpack of a saved tensor runs the segment's forward again inside
`torch/utils/checkpoint.py(...): recompute_fn`, a Python span recorded with `with_stack=True`. Per step: those spans
(inside the windows' host spans), their host time (union), and the device ops launched by runtime calls on the span's
thread inside it (matched by correlation id), collectives aside: their time (union), the part of it that is layout transposes, and the
part with a collective running meanwhile. Without Python stacks (or with the reentrant variant, whose backward node
also runs the segment's backward) the recomputation is not told apart: no record.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMM, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.ddp_copies import _launched
from llmdiag.diagnose.metrics.rank.optimizer_step import _in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.recompute import Recompute

FILE = "torch/utils/checkpoint.py("
FN = "): recompute_fn"


def _is_recompute(s: str) -> bool:
    return s.startswith(FILE) and s.endswith(FN)


def recompute(t: RankTrace, wins: list[Window]) -> Recompute | None:
    if not wins or not t.is_gpu or t.kind is None:
        return None
    py = t.cat_mask("python_function")
    if not py.any():
        return None
    spans = _in_windows(t, np.flatnonzero(t.name_mask(_is_recompute, py & (t.stream < 0))), wins)
    if not len(spans):
        return None
    n = len(wins)
    k = _launched(t, spans)
    k = k[t.kind[k] != COMM]  # a collective launched there (FSDP's re-gather) is communication, not the forward
    ku = iv.union(t.ts[k], t.ts[k] + t.dur[k])
    tr = k[t.name_mask(lambda s: "transpose" in s.lower())[k]] if len(k) else k
    comm = np.flatnonzero((t.stream >= 0) & (t.kind == COMM))
    cu = iv.union(t.ts[comm], t.ts[comm] + t.dur[comm])
    hu = iv.union(t.ts[spans], t.ts[spans] + t.dur[spans])
    return Recompute(
        spans=len(spans) / n, host_ms=iv.total(hu) / NS_PER_MS / n, device_ms=iv.total(ku) / NS_PER_MS / n,
        kernels=len(k) / n, transpose_ms=iv.total(iv.union(t.ts[tr], t.ts[tr] + t.dur[tr])) / NS_PER_MS / n,
        comm_overlap_ms=iv.intersect_total(ku, cu) / NS_PER_MS / n)
