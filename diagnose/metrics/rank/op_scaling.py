"""How a CPU run's GEMMs cost with their shape, fitted over the run's own GEMMs, for the what-if prediction
at other microbatch sizes (diagnose.metrics.action_costs reads the part of each action that does not shrink).

A pipeline run's microbatches all have one size, but its GEMMs do not: forward and grad-input GEMMs have the
microbatch's tokens T as M (rows), grad-weight GEMMs have them as K (the reduced dimension), and the model's
widths differ between layers. Over the distinct 2-D shapes (M, K, N) of the run the self time of one GEMM is
fitted as

    a + α·M·K·N + β·M·N        (least squares over per-shape medians, weighted by √count; every term ≥ 0)

`a` a cost per call, `α` per multiply-accumulate, `β` per output element (the output is written, and read
back, once per block of K: a GEMM with a short K and a wide output runs slower per MAC). At a smaller
microbatch M·K·N shrinks with T; M·N shrinks only where T is M: a grad-weight GEMM's output is a weight's
size, so its output term is as fixed as `a`. T is the M most GEMMs of the run have (each forward and
grad-input GEMM has it). An **estimate**: it extrapolates the run's shape dependence to smaller T, and nothing
in one run shows how efficiency changes below its smallest dimension.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from llmdiag.diagnose.model.dc import dataclass

GEMM_2D = frozenset({"aten::mm", "aten::addmm"})
Shape = tuple[int, int, int]  # (M, K, N)


@dataclass(frozen=True)
class GemmFit:
    """A GEMM's time as linear in its shape (per call, per multiply-accumulate, per output), fitted on one rank."""

    a: float  # ns per call
    per_mac: float  # ns per multiply-accumulate
    per_out: float  # ns per output element
    tokens: int  # the microbatch's tokens: the M most GEMMs have

    def model_ns(self, s: Shape) -> float:
        m, k, n = s
        return self.a + self.per_mac * m * k * n + self.per_out * m * n

    def fixed_share(self, s: Shape) -> float:
        """The part of a GEMM of shape `s` that stays at any microbatch size: the call, and the output term
        where the tokens are the reduced dimension (a grad-weight GEMM)."""
        m, k, _ = s
        total = self.model_ns(s)
        if total <= 0:
            return 0.0
        fixed = self.a + (self.per_out * m * s[2] if k == self.tokens and m != self.tokens else 0.0)
        return min(fixed / total, 1.0)


def gemm_shape(name: str, dims) -> Shape | None:
    """(M, K, N) of a 2-D mm/addmm from its `Input Dims` (addmm's first input is the bias); None otherwise."""
    if not isinstance(dims, list):
        return None
    mats = dims[1:3] if name == "aten::addmm" else dims[:2]
    if len(mats) != 2 or not all(isinstance(d, list) and len(d) == 2 and all(isinstance(x, int) and x > 0 for x in d)
                                 for d in mats):
        return None
    (m, k), (k2, n) = mats
    return (m, k, n) if k == k2 else None


def fit_gemms(samples: list[tuple[Shape, int]]) -> GemmFit | None:
    """The fit over (shape, self ns) samples; None without 3 distinct shapes whose terms can be told apart
    (then the caller keeps its shape-free model)."""
    by: dict[Shape, list[int]] = defaultdict(list)
    for s, ns in samples:
        by[s].append(ns)
    if len(by) < 3:
        return None
    shapes = sorted(by)
    x = np.array([[1.0, m * k * n, m * n] for m, k, n in shapes])
    y = np.array([float(np.median(by[s])) for s in shapes])
    w = np.sqrt([len(by[s]) for s in shapes])
    coef = _nonneg_lstsq(x, y, w)
    if coef is None or coef[1] <= 0:
        return None
    tokens = Counter(m for m, _, _ in (s for s, _ in samples)).most_common(1)[0][0]
    return GemmFit(float(coef[0]), float(coef[1]), float(coef[2]), int(tokens))


def _nonneg_lstsq(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Weighted least squares with every coefficient ≥ 0: the terms whose coefficient comes out negative are
    dropped (fixed at 0) and the rest refitted, up to all but one; columns are scaled so the solve is
    well conditioned."""
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)
    xs = x / scale
    keep = list(range(x.shape[1]))
    while keep:
        if np.linalg.matrix_rank(xs[:, keep]) < len(keep):
            return None
        c, *_ = np.linalg.lstsq(xs[:, keep] * w[:, None], y * w, rcond=None)
        if (c >= 0).all():
            out = np.zeros(x.shape[1])
            out[keep] = c
            return out / scale
        keep.pop(int(np.argmin(c)))
    return None
