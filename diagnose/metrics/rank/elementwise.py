"""Unfused elementwise and reduction kernels: their share of compute, and which op patterns launch them.

Eager PyTorch runs each pointwise op as its own kernel (`vectorized_elementwise_kernel`,
`unrolled_elementwise_kernel`, `elementwise_kernel`, `reduce_kernel`, `CatArrayBatchedCopy`, the same names on
ROCm), each reading and writing its whole tensor: an RMSNorm written in Python is ~6 of them (pow, mean, add,
rsqrt, mul, mul), rotary embeddings neg/cat/mul/add, SwiGLU silu and mul, dtype casts a copy each. A fused
kernel (torch.compile's Triton kernels, a fused RMSNorm or rotary kernel) moves the data once. Kernels are
grouped by the aten op that launched them (the innermost host op around the launch), else by the functor their
name carries. Triton kernels are already fused and never counted.
"""

from __future__ import annotations

import numpy as np

from llmdiag.diagnose.io.trace import COMPUTE, CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.name_memo import per_name
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.sets import median  # np.median without its numpy.ma import (~7 ms)
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.analysis import Hints
from llmdiag.diagnose.model.format import NS_PER_MS

_TOKENS = ("elementwise_kernel", "at::native::reduce_kernel", "CatArrayBatchedCopy")
_HEAD = 512  # characters of a name read: the kernel's template name and its functor sit in the head
# (group, launching aten ops, functor tokens of the kernel name when no op is recorded -> the op they stand for).
PATTERNS: tuple[tuple[str, frozenset, tuple[tuple[str, str], ...]], ...] = (
    ("norm", frozenset({"aten::pow", "aten::mean", "aten::rsqrt", "aten::var_mean", "aten::sqrt", "aten::pow_",
                        "aten::rsqrt_"}), (("pow_tensor", "pow"), ("rsqrt", "rsqrt"), ("MeanOps", "mean"))),
    ("rotary", frozenset({"aten::neg", "aten::cat", "aten::neg_"}), (("neg_kernel", "neg"),
                                                                     ("CatArrayBatchedCopy", "cat"))),
    ("activation", frozenset({"aten::silu", "aten::gelu", "aten::sigmoid", "aten::silu_backward",
                              "aten::gelu_backward", "aten::silu_", "aten::sigmoid_backward"}),
     (("silu", "silu"), ("gelu", "gelu"), ("sigmoid", "sigmoid"))),
    ("casts", frozenset({"aten::copy_", "aten::_to_copy", "aten::to"}), (("copy_kernel", "copy"),)),
    ("arith", frozenset({"aten::mul", "aten::add", "aten::sub", "aten::div", "aten::mul_", "aten::add_", "aten::div_",
                         "aten::sub_"}),
     (("MulFunctor", "mul"), ("AddFunctor", "add"), ("CUDAFunctor_add", "add"), ("mul_kernel", "mul"),
      ("add_kernel", "add"), ("DivFunctor", "div"))),
)
OTHER = "other"
_PATTERN_OPS = frozenset().union(*(ops for _, ops, _ in PATTERNS))


def label(group: str, ops: set[str]) -> str:
    """A group's name as its ops show it: `pow/mean/rsqrt (RMSNorm)` only where two of those ops are seen,
    `neg/cat (rotary)` only with both, `silu/mul` style names otherwise: a lone `cat` is a concatenation."""
    names = "/".join(sorted(ops))
    if group == "norm" and len(ops & {"pow", "mean", "rsqrt", "sqrt", "var_mean"}) >= 2:
        return f"{names} (RMSNorm)"
    if group == "rotary" and {"neg", "cat"} <= ops:
        return f"{names} (rotary)"
    if group == "activation" and ops & {"silu", "gelu", "silu_backward", "gelu_backward"}:
        return f"{names} (activation)"
    if group == "casts":
        return f"{names} (dtype casts)"
    return names


@per_name
def is_elementwise(name: str) -> bool:
    head = name[:_HEAD]
    return not head.startswith("triton") and any(tok in head for tok in _TOKENS)


def _pattern(op: str | None, kernel: str) -> tuple[str, str]:
    """(group, op short name) of one kernel: from its launching op, else from its name's functor."""
    if op is not None:
        short = op.removeprefix("aten::").rstrip("_") or op
        return next((g for g, ops, _ in PATTERNS if op in ops), OTHER), short[:40]
    head = kernel[:_HEAD]
    for g, _, toks in PATTERNS:
        for tok, short in toks:
            if tok in head:
                return g, short.rstrip("_")
    return OTHER, "?"


def elementwise_facts(t: RankTrace, wins: list[Window], h: Hints) -> None:
    """Fills `h`'s elementwise fields over the steps' compute kernels (GPU traces only). `elementwise_fusable_ms`
    is per pattern its time × (1 − 1/k), k its distinct ops (pow, mean, rsqrt, ...): fused, each pattern's data is
    assumed to move once, about one of its k kernels' worth."""
    if not t.is_gpu or t.kind is None:
        return
    comp = in_windows(t, (t.kind == COMPUTE) & (t.stream >= 0), wins)
    total = float(t.dur[comp].sum())
    if total <= 0:
        return
    ids = t.name_ids(is_elementwise, comp)
    idx = np.flatnonzero(comp & np.isin(t.name, ids)) if len(ids) else np.zeros(0, np.int64)
    n = max(1, len(wins))
    h.elementwise_frac = float(t.dur[idx].sum()) / total
    h.elementwise_per_step = len(idx) / n
    h.elementwise_median_us = median(t.dur[idx]) / 1e3 if len(idx) else None
    if not len(idx):
        h.elementwise_ms_by_pattern, h.elementwise_fusable_ms = {}, 0.0
        return
    # Only the patterns' own ops are candidates: a kernel launched inside one (at any depth) is its work, and
    # the innermost-op search stays small on traces with 10^5 host ops.
    op_ids = [i for i, nm in enumerate(t.names) if nm in _PATTERN_OPS]
    ops = np.flatnonzero(np.isin(t.name, op_ids) & (t.kind == CPU_OP) & (t.stream < 0)) if op_ids else idx[:0]
    launch = host_ops.launching_ops(t, ops, t.kind) if len(ops) else {}
    op_name = np.full(len(idx), -1, np.int64)
    if launch:
        pos = {d: j for j, d in enumerate(idx.tolist())}
        for d, o in launch.items():
            j = pos.get(d)
            if j is not None:
                op_name[j] = t.name[o]
    # one pattern lookup per distinct (launching op, kernel name): kernels repeat thousands of times
    key = np.where(op_name >= 0, op_name, -1 - t.name[idx].astype(np.int64))
    uniq, inv = np.unique(key, return_inverse=True)
    tot = np.bincount(inv, weights=t.dur[idx].astype(np.float64))
    by: dict[tuple[str, str], float] = {}
    for k, v in zip(uniq.tolist(), tot.tolist()):
        pk = _pattern(t.names[k], "") if k >= 0 else _pattern(None, t.names[-1 - k])
        by[pk] = by.get(pk, 0.0) + v
    groups = _groups(by)
    h.elementwise_ms_by_pattern = ms_by_pattern(groups, n)
    h.elementwise_fusable_ms = sum(v * (1 - 1 / k) for name, (v, k) in groups.items() if name != OTHER) / NS_PER_MS / n


def ms_by_pattern(groups: dict[str, tuple[float, int]], n: int) -> dict[str, float]:
    """ms per step by pattern, largest first; ties by name, so the order does not depend on the hash seed."""
    return {k: v / NS_PER_MS / n for k, (v, _) in sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))}


def _groups(by: dict[tuple[str, str], float]) -> dict[str, tuple[float, int]]:
    """{label: (ns, k ops fused)}. Within a group, an op with under a tenth of the group's largest op's time is
    not part of the same chain (a stray `neg` beside a model's big `cat`s): it stands alone, with k = 1."""
    out: dict[str, tuple[float, int]] = {}

    def put(name: str, v: float, k: int) -> None:
        old = out.get(name, (0.0, k))
        out[name] = (old[0] + v, max(old[1], k))

    for g in sorted({g for g, _ in by}):
        ops = {short: v for (gg, short), v in by.items() if gg == g}
        if g == OTHER:
            put(OTHER, sum(ops.values()), 1)
            continue
        top = max(ops.values())
        chain = [o for o, v in ops.items() if v >= 0.1 * top]  # in `by`'s order: sums do not depend on hash seed
        put(label(g, set(chain)), sum(ops[o] for o in chain), len(chain))
        for o in ops:
            if o not in chain:
                put(label(g, {o}), ops[o], 1)
    return out
