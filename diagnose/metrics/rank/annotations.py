"""Time by user annotation (HTA's get_gpu_user_annotation_breakdown), with the kernel time inside each.

A `record_function("name")` span is written twice by Kineto: `user_annotation` on the host thread and
`gpu_user_annotation` on each stream its kernels ran on (pid = device, tid = stream), spanning those kernels.
Per annotation name: how many spans, and their durations' sum, mean, min, max and sample standard deviation
(HTA's columns, all spans of the trace, nested ones each counted, deviation 0 for one span as in HTA). With
`gpu=True` also the device time inside: per span, the kernels, memcpys and memsets on the span's stream
clipped to it, summed; a span longer than its kernel time holds gaps (the stream waited inside it). ProfilerStep
spans are annotations too and are kept (HTA keeps them).
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.model.dc import dataclass
from llmdiag.diagnose.io.trace import COMM, COMPUTE, MEMCPY, MEMSET, RankTrace


@dataclass
class AnnotationRow:
    name: str
    spans: int
    sum_us: float
    mean_us: float
    min_us: float
    max_us: float
    std_us: float  # sample standard deviation (ddof 1, as pandas); 0 for one span, as HTA writes it
    device_us: float  # gpu=True: device time inside the spans, on their streams; NaN for host annotations


def annotation_breakdown(t: RankTrace, gpu: bool = True) -> list[AnnotationRow]:
    """Rows by total span time, longest first, for a classified trace; [] where the trace has none."""
    cat = "gpu_user_annotation" if gpu else "user_annotation"
    if cat not in t.cats:
        return []
    rows = np.flatnonzero(t.cat == t.cats.index(cat))
    if gpu:
        rows = rows[t.stream[rows] >= 0]
    else:
        rows = rows[t.stream[rows] < 0]
    if not len(rows):
        return []
    inside = _device_inside(t, rows) if gpu else np.full(len(rows), np.nan)
    out = []
    for n in np.unique(t.name[rows]).tolist():
        m = t.name[rows] == n
        d = t.dur[rows[m]] / 1e3
        out.append(AnnotationRow(t.names[n], int(m.sum()), float(d.sum()), float(d.mean()), float(d.min()),
                                 float(d.max()), float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                                 float(inside[m].sum())))
    out.sort(key=lambda r: (-r.sum_us, r.name))
    return out


def _device_inside(t: RankTrace, spans: np.ndarray) -> np.ndarray:
    """Per span: µs of device events on its stream within it (each event clipped to the span)."""
    dev = np.flatnonzero(t.kind_mask(COMPUTE, COMM, MEMCPY, MEMSET) & (t.stream >= 0))
    out = np.zeros(len(spans))
    by_stream = {int(s): dev[t.stream[dev] == s] for s in np.unique(t.stream[dev]).tolist()}
    longest = {s: int(t.dur[ev].max()) for s, ev in by_stream.items() if len(ev)}
    for j, i in enumerate(spans.tolist()):
        ev = by_stream.get(int(t.stream[i]))
        if ev is None or not len(ev):
            continue
        a, b = int(t.ts[i]), int(t.ts[i] + t.dur[i])
        # events by start: any that overlaps [a, b) starts in [a - longest, b)
        lo = np.searchsorted(t.ts[ev], a - longest[int(t.stream[i])], side="left")
        hi = np.searchsorted(t.ts[ev], b, side="left")
        e = ev[lo:hi]
        clip = np.minimum(t.ts[e] + t.dur[e], b) - np.maximum(t.ts[e], a)
        out[j] = float(clip[clip > 0].sum()) / 1e3
    return out
