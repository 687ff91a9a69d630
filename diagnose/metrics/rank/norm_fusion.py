"""Normalization kernels and the pointwise kernels chained to them (model/norm_fusion.py), from one rank's events.

A chain is a run of consecutive compute kernels on one stream (in time order, no other kernel between) made of
normalization kernels and pointwise kernels whose launching aten op (the innermost host op around the launch) is
a ReLU-style op of one tensor input (UNARY) or an add/mul/activation-backward of two (BINARY): eager
conv -> BN -> ReLU, BN -> add -> ReLU, ReLU-backward -> BN-backward, add -> LayerNorm. Only chains with at least
one normalization kernel count: a pointwise kernel next to a GEMM or a loss is not this fusion's.

What fusion removes (the estimate): a UNARY op fused into the normalization's pass costs nothing more (its read
of the tensor the normalization wrote and its own write both go); a BINARY op still reads its second operand
(the residual, the saved output), so 2 of its 3 equal-size tensor accesses go (SAVED_BINARY). The
normalization kernels themselves stay: a fused kernel still reads and writes the tensor once.
"""

from __future__ import annotations

import re

import numpy as np

from llmdiag.diagnose.io.trace import COMPUTE, CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.elementwise import is_elementwise
from llmdiag.diagnose.metrics.rank.name_memo import per_name
from llmdiag.diagnose.metrics.rank.overlap import in_windows
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.format import NS_PER_MS
from llmdiag.diagnose.model.lazy_re import lazy_compile
from llmdiag.diagnose.model.norm_fusion import NormFusion

# cuDNN `bn_fw_tr_1C11_*`/`bn_bw_1C11_*`/`bn_fw_inf_*`, `batchnorm_fwtr_nhwc_*`; PyTorch's `batch_norm_*`,
# `layer_norm_*`, `LayerNorm*`, `GammaBetaBackward*`, group norm's `RowwiseMoments`/`Compute*FusedParams`; MIOpen's
# `MIOpenBatchNorm*`, `MIOpenLayerNorm*`; RMSNorm / instance / group norm by name
NORM = lazy_compile(r"\bbn_(fw|bw)_|batchnorm|batch_norm|layer_?norm|GammaBetaBackward|group_?norm|RowwiseMoments|"
                     r"Compute1dBackwardFusedParams|ComputeFusedParams|rms_?norm|instance_?norm", re.I)
FUSED = lazy_compile(r"fused|^triton|renormalize", re.I)  # already fused (vLLM's fused_add_rms_norm, Inductor's)
UNARY = frozenset(f"aten::{o}" for o in ("relu", "relu_", "clamp_min", "clamp_min_", "clamp", "clamp_", "hardtanh",
                                         "hardtanh_", "silu", "silu_", "gelu", "sigmoid", "sigmoid_", "tanh", "tanh_",
                                         "leaky_relu", "leaky_relu_", "threshold", "threshold_", "elu", "elu_"))
BINARY = frozenset(f"aten::{o}" for o in ("add", "add_", "mul", "mul_", "sub", "sub_", "threshold_backward",
                                          "silu_backward", "gelu_backward", "sigmoid_backward", "tanh_backward",
                                          "hardtanh_backward", "leaky_relu_backward", "elu_backward"))
SAVED_BINARY = 2.0 / 3.0  # of a two-input pointwise kernel's time: its output write and one re-read go, one read stays
MIN_SAVED_SHARE = 0.01  # of the steps' compute kernel time: below it no record (nothing to say; summaries stay small)
NAME_CUT = 120
TOP_OPS = 4
_HEAD = 300


@per_name
def is_norm(name: str) -> bool:
    """A normalization kernel not already fused by its library or compiler."""
    head = name[:_HEAD]
    return bool(NORM.search(head)) and not FUSED.search(head)


def chain_kernels(t: RankTrace, wins: list[Window]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, int]] | None:
    """(normalization kernels, UNARY chain kernels, BINARY chain kernels, launching op by pointwise kernel) of the
    steps, as event indices; None without normalization kernels. Also what the simulations edit
    (critical_path/simulate.py "norm_fusion", critical_path/after_fix.py)."""
    if not wins or not t.is_gpu or t.kind is None:
        return None
    comp = in_windows(t, (t.kind == COMPUTE) & (t.stream >= 0), wins)
    norm = t.name_mask(is_norm, comp)
    if not norm.any():
        return None
    ew = t.name_mask(is_elementwise, comp)
    op_ids = [i for i, nm in enumerate(t.names) if nm in UNARY or nm in BINARY]
    ops = np.flatnonzero(np.isin(t.name, op_ids) & (t.kind == CPU_OP) & (t.stream < 0)) if op_ids else np.zeros(0, int)
    launch = host_ops.launching_ops(t, ops, t.kind) if len(ops) and ew.any() else {}
    kern = np.flatnonzero(comp)
    kern = kern[np.lexsort((t.ts[kern], t.stream[kern]))]
    label = np.where(norm[kern], 2, 0)
    cand = np.array([ew[i] and i in launch for i in kern.tolist()], bool) if launch else np.zeros(len(kern), bool)
    label[cand & (label == 0)] = 1
    # a run of chain kernels: breaks at a kernel of no chain and where the stream changes
    brk = np.ones(len(kern), bool)
    if len(kern) > 1:
        brk[1:] = (label[1:] == 0) | (label[:-1] == 0) | (t.stream[kern[1:]] != t.stream[kern[:-1]])
    run = np.cumsum(brk) - 1
    with_norm = np.bincount(run, weights=(label == 2).astype(float), minlength=int(run[-1]) + 1 if len(run) else 0) > 0
    pw = kern[(label == 1) & with_norm[run]]
    unary = np.array([t.names[t.name[launch[i]]] in UNARY for i in pw.tolist()], bool)
    return kern[label == 2], pw[unary], pw[~unary], {i: launch[i] for i in pw.tolist()}


def norm_fusion(t: RankTrace, wins: list[Window]) -> NormFusion | None:
    """The rank's NormFusion record (module docstring), or None without normalization kernels or where what fusion
    removes is under MIN_SAVED_SHARE of the compute kernel time (a LayerNorm beside one add: nothing to state, and
    no simulation is run for it)."""
    got = chain_kernels(t, wins)
    if got is None or t.kind is None:
        return None
    norm, unary, binary, op_of = got
    n = len(wins)
    compute = float(t.dur[in_windows(t, (t.kind == COMPUTE) & (t.stream >= 0), wins)].sum())
    if float(t.dur[unary].sum()) + SAVED_BINARY * float(t.dur[binary].sum()) < MIN_SAVED_SHARE * compute:
        return None

    def ms(k: np.ndarray) -> float:
        return float(t.dur[k].sum()) / NS_PER_MS / n

    ids, inv = np.unique(t.name[norm], return_inverse=True)
    per = np.bincount(inv.reshape(-1), weights=t.dur[norm].astype(float))
    top = int(ids[int(np.argmax(per))])
    by_op: dict[str, float] = {}
    for i in np.concatenate([unary, binary]).tolist():
        o = t.names[t.name[op_of[i]]]
        by_op[o] = by_op.get(o, 0.0) + float(t.dur[i]) / NS_PER_MS / n
    u, b = ms(unary), ms(binary)
    return NormFusion(norm_ms=ms(norm), norm_count=len(norm) / n, norm_kernel=t.names[top][:NAME_CUT],
                      norm_kernel_ms=float(per.max()) / NS_PER_MS / n, native="at::native" in t.names[top][:_HEAD],
                      unary_ms=u, binary_ms=b, pointwise_count=(len(unary) + len(binary)) / n,
                      saved_ms=u + b * SAVED_BINARY,
                      ops=dict(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OPS]))


def fused_weights(sim, unary: np.ndarray, binary: np.ndarray) -> np.ndarray:
    """`sim`'s weights (critical_path/simulate.py Simulator) with the chain pointwise kernels' DEVICE edges
    inside the windows shortened by what fusion removes: UNARY ones to 0, BINARY ones to 1 − SAVED_BINARY
    (`unary`, `binary`: positions in the graph's events)."""
    w = sim.scaled(unary, 0.0) if len(unary) else sim.w
    if not len(binary):
        return w
    base = sim.w
    sim.w = w
    try:
        return sim.scaled(binary, 1.0 - SAVED_BINARY)
    finally:
        sim.w = base
