"""Where the device time goes: top kernels (or top-level CPU ops) and launch-pattern hints."""

from __future__ import annotations


import numpy as np

from llmdiag.diagnose.metrics.rank.host_wait import host_wait_ms
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.precision import (conv_time_by_precision, fp32_on_path_frac, gemm_time_by_precision,
                                                     layout_transform_ns)
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.analysis import Hints, KernelStat
from llmdiag.diagnose.metrics.rank.steps import DATALOADER_RE, Window, is_dataloader  # noqa: F401 (DATALOADER_RE re-exported)
from llmdiag.diagnose.io.trace import COMM, COMPUTE, KIND_NAMES, MEMCPY, MEMSET, RankTrace



def top_kernels(t: RankTrace, wins: list[Window], k: int = 20) -> tuple[list[KernelStat], float]:
    """The `k` kernels (or top-level CPU ops) with most time in the windows, and the time of all of them (ms)."""
    kinds = (COMPUTE, COMM, MEMCPY, MEMSET)
    mask = in_windows(t, t.kind_mask(*kinds), wins)
    if not t.is_gpu:
        mask &= t.kind != MEMCPY  # CPU traces: top-level ops and gloo spans
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return [], 0.0
    names = t.name[idx]
    dur = t.dur[idx]
    total = float(dur.sum())
    total_all = total or 1.0
    uniq, inv = np.unique(names, return_inverse=True)
    tot = np.bincount(inv, weights=dur)
    cnt = np.bincount(inv)
    mx = np.zeros(len(uniq))
    np.maximum.at(mx, inv, dur)
    kind_of = np.zeros(len(uniq), np.int8)
    kind_of[inv] = t.kind[idx]
    out = []
    for j in np.argsort(-tot)[:k]:
        out.append(
            KernelStat(
                name=t.names[int(uniq[j])], kind=KIND_NAMES[int(kind_of[j])], count=int(cnt[j]),
                total_ms=float(tot[j]) / NS_PER_MS, mean_us=float(tot[j]) / cnt[j] / 1e3, max_us=float(mx[j]) / 1e3,
                share=float(tot[j]) / total_all,
            )
        )
    return out, total / NS_PER_MS


def _median(x: np.ndarray) -> float:
    """np.median of a non-empty array without NaN, minus its lazy numpy.ma import (20 ms per process)."""
    n = len(x)
    part = np.partition(x, [(n - 1) // 2, n // 2])
    return (float(part[(n - 1) // 2]) + float(part[n // 2])) / 2


def hints(t: RankTrace, wins: list[Window], idle_ms: float, step_ms: float) -> Hints:
    n_steps = max(len(wins), 1)
    kern = in_windows(t, t.kind_mask(COMPUTE, COMM) & (t.stream >= 0), wins)
    durs = t.dur[kern]
    cc = _compute_capability(t)
    fp32 = None
    comp = in_windows(t, (t.kind == COMPUTE) & (t.stream >= 0), wins)
    by_prec = gemm_time_by_precision(t, comp) if comp.any() else {}
    total = float(t.dur[comp].sum()) if comp.any() else 0.0
    if total and set(by_prec) - {"unknown"}:  # some GEMM's precision is evidenced; unknown stays unknown
        fp32 = by_prec.get("fp32", 0) / total
    dl = in_windows(t, t.name_mask(is_dataloader, t.stream < 0), wins)
    dl_frac = None
    if step_ms > 0 and wins:
        from llmdiag.diagnose.metrics.rank import intervals as iv

        u = iv.union(t.ts[dl], t.ts[dl] + t.dur[dl])
        dl_frac = iv.total(u) / NS_PER_MS / (step_ms * n_steps)
    return Hints(
        kernels_per_step=float(kern.sum()) / n_steps,
        median_kernel_us=_median(durs) / 1e3 if len(durs) else None,
        short_kernel_frac=float((durs < 10_000).mean()) if len(durs) else None,
        device_idle_frac=(idle_ms / step_ms) if t.is_gpu and step_ms > 0 else None,
        dataloader_frac=dl_frac,
        fp32_gemm_frac=fp32,
        compute_capability=cc,
        gemm_ms_by_precision={k: v / NS_PER_MS / n_steps for k, v in sorted(by_prec.items())},
        fp32_on_path_frac=fp32_on_path_frac(t, comp) if by_prec.get("fp32") else None,
        conv_ms_by_precision={k: v / NS_PER_MS / n_steps for k, v in sorted(conv_time_by_precision(t, comp).items())}
        if by_prec else {},
        layout_transform_ms=layout_transform_ns(t, comp) / NS_PER_MS / n_steps if t.is_gpu and comp.any() else None,
        host_wait_ms=host_wait_ms(t, wins) if t.is_gpu else None,
    )


def _compute_capability(t: RankTrace) -> float | None:
    props = t.meta.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        p = props[0]
        try:
            return float(p.get("computeMajor")) + float(p.get("computeMinor", 0)) / 10
        except (TypeError, ValueError):
            return None
    return None
