"""GPU time per step: busy by kind, exposed communication, and idle split by what the GPU waited for.

Intervals are merged per kind over all streams. Idle is a gap with no kernel, copy or memset on any stream;
each idle gap is split by the launch of the work that ends it (correlation id -> runtime call): until that
launch the GPU waited for the host; from the launch on, for a dependency or launch latency.
"""

from __future__ import annotations

from .collectives import COMM
from .steps import host_steps

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def merge(iv):
    iv = sorted(iv)
    out = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def total(iv):
    return sum(b - a for a, b in iv)


def clip(iv, lo, hi):
    return [[max(a, lo), min(b, hi)] for a, b in iv if b > lo and a < hi]


def intersect(x, y):
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append([a, b])
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def per_step(t) -> dict:
    """Per ProfilerStep (host window start .. next step's start, the last one its own end): comm busy, compute
    busy, exposed comm (comm with no compute kernel under it), idle, and idle waiting for the host (ms)."""
    dev = t.cat(*DEVICE_CATS)
    comm = merge([(e["ts"], e["ts"] + e["dur"]) for e in dev if e["cat"] == "kernel" and COMM.search(e["name"])])
    comp = merge([(e["ts"], e["ts"] + e["dur"]) for e in dev if not (e["cat"] == "kernel" and COMM.search(e["name"]))])
    busy = merge(comm + comp)
    launch = {}
    for e in t.cat("cuda_runtime", "cuda_driver"):
        c = (e.get("args") or {}).get("correlation")
        if c is not None:
            launch[c] = e["ts"]
    starts = sorted(((e["ts"], launch.get((e.get("args") or {}).get("correlation"))) for e in dev), key=lambda x: x[0])
    steps = host_steps(t)
    out = {}
    for i, (n, s, d) in enumerate(steps):
        hi = steps[i + 1][1] if i + 1 < len(steps) else s + d
        lo = s
        b, cm, cp = clip(busy, lo, hi), clip(comm, lo, hi), clip(comp, lo, hi)
        gaps = [[x[1], y[0]] for x, y in zip(b, b[1:])]
        if b:
            gaps = ([[lo, b[0][0]]] if b[0][0] > lo else []) + gaps
        host_wait = 0.0
        k = 0
        for a, z in gaps:
            while k < len(starts) and starts[k][0] < z:
                k += 1
            nxt = starts[k] if k < len(starts) else None
            if nxt and nxt[0] <= z + 1 and nxt[1] is not None and nxt[1] > a:
                host_wait += min(nxt[1], z) - a
        out[n] = {"window_ms": round((hi - lo) / 1000, 3), "comm_ms": round(total(cm) / 1000, 3),
                  "compute_ms": round(total(cp) / 1000, 3),
                  "exposed_comm_ms": round((total(cm) - total(intersect(cm, cp))) / 1000, 3),
                  "idle_ms": round((hi - lo - total(b)) / 1000, 3), "idle_host_wait_ms": round(host_wait / 1000, 3)}
    return out
