"""GEMM and attention throughput against the device's roofline (TraceLens' per-GEMM / per-attention view).

For each GEMM op (aten::mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm, ...) and SDPA attention op whose
`Input Dims` the trace records (record_shapes), the kernels it launched (diagnose.metrics.host_ops; the
innermost such op owns a kernel, so aten::linear → aten::addmm is counted once) give its time, and its shape
gives the work:
- GEMM FLOPs 2·M·N·K (×batch for bmm/baddbmm and batched matmul; linear: M the product of the input's leading
  dims, N the weight's rows);
- attention FLOPs 2·B·H·Sq·Sk·(D + Dv) forward (4·B·H·S²·D at equal sizes: Q·Kᵀ and P·V), ×2.5 backward. The
  causal mask is not recorded, so a causal attention's FLOPs are counted in full: its TFLOP/s is up to 2× too high;
- bytes: each input tensor and the output once, at the input's element size (model.dtypes): a lower
  bound on the memory traffic.
Achieved TFLOP/s = FLOPs / kernel time, GB/s = bytes / kernel time, intensity = FLOPs / byte. Against the
device's datasheet peaks (diagnose.model.devices.compute_peak) an op is compute-bound when its intensity is
above the ridge point (peak FLOP/s / peak bytes/s of its precision), else memory-bound; an unknown device or
precision names no class. A float GEMM whose kernel name says TF32 (metrics/rank/precision.py), or that runs faster
than the fp32 peak, ran on tensor cores: its dtype reads tf32 and the TF32 peak is used. Rows: the TOP_ROWS (op, shape, dtype) with the most kernel time; the rest summed into "(other)".
"""

from __future__ import annotations

import math

import numpy as np

from llmdiag.diagnose.io.columns import ATTENTION_OPS, GEMM_OPS
from llmdiag.diagnose.io.trace import COMPUTE, CPU_OP, RankTrace
from llmdiag.diagnose.metrics.rank import host_ops
from llmdiag.diagnose.metrics.rank.launches import device_events
from llmdiag.diagnose.metrics.rank.precision import host_precision, name_precision
from llmdiag.diagnose.model.dtypes import element_bytes
from llmdiag.diagnose.metrics.rank.steps import Window
from llmdiag.diagnose.model.devices import ComputePeak, compute_peak
from llmdiag.diagnose.model.kernel_views import RooflineRow

TOP_ROWS = 12
BACKWARD_FACTOR = 2.5  # attention backward: dQ, dK, dV and the recomputed P (FlashAttention-2's count)
OTHER = "(other)"
# name -> (index of A in Input Dims, rank both operands must have; 0: any, as matmul broadcasts)
_A_B = {"aten::mm": (0, 2), "aten::_scaled_mm": (0, 2), "aten::_int_mm": (0, 2), "aten::addmm": (1, 2),
        "aten::_addmm_activation": (1, 2), "aten::bmm": (0, 3), "aten::baddbmm": (1, 3), "aten::matmul": (0, 0)}


def _tensor(d) -> bool:
    return isinstance(d, list) and 0 < len(d) <= 8 and all(type(x) is int and 0 < x < 2**40 for x in d)


def gemm_work(name: str, dims) -> tuple[int, int] | None:
    """(FLOPs, output elements) of one GEMM call from its Input Dims; None where the shape is not one we read."""
    if not isinstance(dims, list):
        return None
    if name == "aten::linear":
        if len(dims) < 2 or not _tensor(dims[0]) or not _tensor(dims[1]) or len(dims[1]) != 2 or dims[0][-1] != dims[1][1]:
            return None
        m, k, n = math.prod(dims[0][:-1]), dims[0][-1], dims[1][0]
        return 2 * m * k * n, m * n
    j, nd = _A_B.get(name, (None, 0))
    if j is None or len(dims) < j + 2 or not _tensor(a := dims[j]) or not _tensor(b := dims[j + 1]):
        return None
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2] or (nd and not len(a) == len(b) == nd):
        return None
    k, n = a[-1], b[-1]
    if len(b) == 2:  # [..., M, K] x [K, N]: the leading dims are rows
        batch, m = 1, math.prod(a[:-1])
    else:
        if len(a) != len(b) or a[:-2] != b[:-2]:
            return None
        batch, m = math.prod(a[:-2]), a[-2]
    return 2 * batch * m * k * n, batch * m * n


def attention_work(name: str, dims) -> tuple[int, int] | None:
    """(FLOPs, output elements) of one SDPA call: inputs [B, H, S, D] (q, k, v; backward: grad_out first)."""
    if not isinstance(dims, list):
        return None
    back = name.endswith("_backward")
    qkv = dims[1:4] if back else dims[0:3]
    if len(qkv) != 3 or not all(_tensor(x) and len(x) == 4 for x in qkv):
        return None
    (b, h, sq, d), (_, _, sk, _), (_, _, _, dv) = qkv
    fwd = 2 * b * h * sq * sk * (d + dv)
    if back:
        return int(fwd * BACKWARD_FACTOR), sum(math.prod(x) for x in qkv)
    return fwd, b * h * sq * dv


def op_bytes(dims, types, out_elems: int) -> int:
    """Inputs and output once each, at their element sizes (the output at the first input's)."""
    types = types if isinstance(types, list) else []
    first = None
    total = 0
    for i, d in enumerate(dims):
        if not _tensor(d):
            continue
        size = (element_bytes(types[i]) if i < len(types) else None) or (first or 4)
        first = first or size
        total += math.prod(d) * size
    return total + out_elems * (first or 4)


def roofline(t: RankTrace, wins: list[Window], device: str, top: int = TOP_ROWS) -> list[RooflineRow]:
    ids = [i for i, n in enumerate(t.names) if n in GEMM_OPS or n in ATTENTION_OPS]
    if not ids or t.kind is None:
        return []
    ops = np.flatnonzero(np.isin(t.name, ids) & (t.stream < 0) & (t.kind == CPU_OP))
    ops = ops[[("Input Dims" in t.comm_args.get(o, ())) for o in ops.tolist()]] if len(ops) else ops
    if not len(ops):
        return []
    dev = device_events(t, wins)
    dev = set(dev[t.kind[dev] == COMPUTE].tolist())
    time_of: dict[int, int] = {}
    tf32: set[int] = set()  # ops with a kernel whose name says TF32 (a float GEMM on tensor cores)
    for d, o in host_ops.launching_ops(t, ops, t.kind).items():
        if d in dev:
            time_of[o] = time_of.get(o, 0) + int(t.dur[d])
            if name_precision(t.names[t.name[d]]) == "tf32":
                tf32.add(o)
    groups: dict[tuple, list] = {}  # (op, shape, dtype) -> [calls, ns, flops, bytes]
    memo: dict[tuple, tuple | None] = {}
    for o, ns in time_of.items():
        name, a = t.names[t.name[o]], t.comm_args[o]
        key = (name, id(a))
        if key not in memo:
            dims, types = a.get("Input Dims"), a.get("Input type")
            w = attention_work(name, dims) if name in ATTENTION_OPS else gemm_work(name, dims)
            memo[key] = None if w is None else ((name, _shape_text(dims), host_precision(types) or ""),
                                                w[0], op_bytes(dims, types, w[1]))
        m = memo[key]
        if m is None:
            continue
        gk = (m[0][0], m[0][1], "tf32") if m[0][2] == "fp32" and o in tf32 else m[0]
        g = groups.setdefault(gk, [0, 0, 0, 0])
        g[0] += 1
        g[1] += ns
        g[2] += m[1]
        g[3] += m[2]
    order = sorted(groups, key=lambda k: (-groups[k][1], k))
    peak = compute_peak(device)
    out = [_row(k[0], k[1], k[2], groups[k], peak) for k in order[:top]]
    if len(order) > top:
        rest = [sum(groups[k][i] for k in order[top:]) for i in range(4)]
        out.append(_row(OTHER, "", "", rest, None))
    return out


def _shape_text(dims) -> str:
    return str(dims).replace(" ", "")[:120]


def _row(op: str, shape: str, dtype: str, g: list, peak: ComputePeak | None) -> RooflineRow:
    calls, ns, flops, nbytes = g
    ms = ns / 1e6
    tflops = flops / 1e12 / (ns / 1e9) if ns else None
    gbps = nbytes / 1e9 / (ns / 1e9) if ns else None
    intensity = flops / nbytes if nbytes else None
    prec = dtype
    if peak and prec == "fp32" and tflops is not None and tflops > peak.tflops.get("fp32", math.inf):
        prec = "tf32"  # faster than fp32 can run: tensor cores (TF32)
    top = peak.tflops.get(prec) if peak and prec else None
    ridge = peak.ridge(prec) if peak and prec else None
    bound = "" if ridge is None or intensity is None else ("compute" if intensity > ridge else "memory")
    return RooflineRow(op=op[:160], shape=shape, dtype=prec, count=calls, kernel_ms=ms, gflop=flops / 1e9,
                       gbytes=nbytes / 1e9, tflops=tflops, gbps=gbps, intensity=intensity, peak_tflops=top,
                       peak_frac=tflops / top if top and tflops is not None else None, bound=bound)
