"""Device work by kind: GEMM precision, elementwise share, communication kernels and their namespaces."""

from __future__ import annotations

import re

from .collectives import COMM

GEMM = re.compile(r"gemm|cutlass|cublas|nvjet|Cijk_|matmul|wgmma|xmma", re.I)
FP32_GEMM = re.compile(r"sgemm|gemm_?f32|Cijk_\w*_S(?:B|S)_|_s\d{3,4}gemm", re.I)  # cuBLAS sgemm, rocBLAS SS
TF32 = re.compile(r"tf32|s1688gemm|_s16816gemm", re.I)
ELEMENTWISE = re.compile(r"elementwise_kernel|vectorized_elementwise|unrolled_elementwise", re.I)


def device_busy(t) -> dict:
    """Kernel time (us) by kind, over all kernels of the trace."""
    out = {"total": 0.0, "comm": 0.0, "gemm": 0.0, "gemm_fp32": 0.0, "gemm_tf32": 0.0, "elementwise": 0.0}
    for e in t.cat("kernel"):
        n, d = e["name"], e["dur"]
        out["total"] += d
        if COMM.search(n):
            out["comm"] += d
        elif GEMM.search(n):
            out["gemm"] += d
            if TF32.search(n):
                out["gemm_tf32"] += d
            elif FP32_GEMM.search(n):
                out["gemm_fp32"] += d
        elif ELEMENTWISE.search(n):
            out["elementwise"] += d
    return out


def shares(t) -> dict:
    b = device_busy(t)
    tot, comp = b["total"] or 1.0, (b["total"] - b["comm"]) or 1.0
    return {"kernel_ms": round(b["total"] / 1000, 3), "comm_ms": round(b["comm"] / 1000, 3),
            "gemm_ms": round(b["gemm"] / 1000, 3),
            "fp32_gemm_share_of_gemm": round(b["gemm_fp32"] / b["gemm"], 3) if b["gemm"] else None,
            "fp32_gemm_share_of_compute": round(b["gemm_fp32"] / comp, 3),
            "elementwise_share_of_compute": round(b["elementwise"] / comp, 3)}


def comm_namespaces(t) -> dict:
    """Communication kernel families by name prefix (ncclDevKernel_*, dpsk::ep::*, multimem_*), with counts."""
    out: dict = {}
    for e in t.cat("kernel"):
        if COMM.search(e["name"]):
            m = re.match(r"(?:void )?([A-Za-z_:]+?)(?:_[A-Z]|\(|<|$)", e["name"])
            key = m.group(1) if m else e["name"][:40]
            out[key] = out.get(key, 0) + 1
    return out


def device(t) -> dict:
    props = t.meta.get("deviceProperties") or []
    p = props[0] if props and isinstance(props[0], dict) else {}
    return {"name": p.get("name"), "compute": (p.get("computeMajor"), p.get("computeMinor")) if p else None}
