"""Device idle held by one host op: for every idle gap of the device, the launch (by correlation id) of the work
that ends it, the host thread that launched it, and the host op on that thread that spans the wait.

A gap's host wait runs from the gap's start to that launch. If one cpu_op on the launching thread covers at least
half of the wait, with no launch call (any thread) inside the covered part, the device idles *during that one
op*: host work inside it, which kernel fusion or graphs do not remove. If the launch itself is the long call (a
first `hipLaunchKernel` / `cudaLaunchKernel` loading code), the wait is inside the launch call, not under an op's
own work: reported as `in_launch`.

Whether a trace can support this at all: an event-sampled trace (`sampled` below: device work recorded with no
launch that correlates, or long stretches of the host thread missing) drops kernels, so its "idle" is partly
unrecorded work; a claim about one op's idle is then unverifiable.
"""

from __future__ import annotations

import re
from itertools import pairwise

from .idle import DEVICE_CATS, merge
from .steps import host_steps

LAUNCH = re.compile(r"^(cuda|hip)(LaunchKernel|LaunchCooperativeKernel|MemcpyAsync|MemsetAsync|GraphLaunch|"
                    r"ModuleLaunchKernel|ExtModuleLaunchKernel|LaunchKernelExC)|^cuLaunchKernel")


def _step_of(steps, ts):
    return next((n for n, s, d in steps if s <= ts < s + d), None)


def stalls(t, min_gap_ms: float = 1.0) -> list[dict]:
    """Device idle gaps >= min_gap_ms whose host wait is held by one op (or one launch call), with that op, its
    thread, how much of the gap it holds, and the step the gap starts in."""
    dev = t.cat(*DEVICE_CATS)
    busy = merge([(e["ts"], e["ts"] + e["dur"]) for e in dev])
    runtime = t.cat("cuda_runtime", "cuda_driver")
    by_corr = {}
    for e in runtime:
        c = (e.get("args") or {}).get("correlation")
        if c is not None:
            by_corr[c] = e
    starts = sorted(dev, key=lambda e: e["ts"])
    launches = sorted(e["ts"] for e in runtime if LAUNCH.match(e["name"]))
    ops_by_tid: dict = {}
    for e in t.cat("cpu_op"):
        ops_by_tid.setdefault(e.get("tid"), []).append(e)
    steps = host_steps(t)
    out, k = [], 0
    for (_, a), (z, _) in pairwise(busy):
        if z - a < min_gap_ms * 1000:
            continue
        while k < len(starts) and starts[k]["ts"] < z:
            k += 1
        nxt = starts[k] if k < len(starts) else None
        lc = by_corr.get((nxt.get("args") or {}).get("correlation")) if nxt else None
        if lc is None or lc["ts"] <= a:
            continue
        wait = min(lc["ts"], z) - a
        row = {"gap_start": a, "gap_ms": round((z - a) / 1000, 3), "host_wait_ms": round(wait / 1000, 3),
               "step": _step_of(steps, a), "tid": lc.get("tid"), "launch": lc["name"],
               "launch_ms": round(lc["dur"] / 1000, 3)}
        # launch calls on any thread inside the wait: the host did queue work, the device waited on it elsewhere
        inside = [x for x in launches if a < x < lc["ts"]]
        row["launches_inside"] = len(inside)
        # the op on the launching thread that covers most of [a, launch): innermost among those covering >= half
        cands = []
        for e in ops_by_tid.get(lc.get("tid"), []):
            lo, hi = max(e["ts"], a), min(e["ts"] + e["dur"], lc["ts"])
            if hi - lo >= 0.5 * wait:
                cands.append((e["dur"], e, (hi - lo)))
        if cands:
            _, op, held = min(cands, key=lambda x: x[0])  # innermost: the shortest op covering it
            cov = op_coverage(t, op)
            row.update(op=op["name"], op_ms=round(op["dur"] / 1000, 3), held_ms=round(held / 1000, 3),
                       encloses_launch=op["ts"] + op["dur"] >= lc["ts"] + lc["dur"],
                       op_children=cov["children"], op_largest_uncovered_ms=cov["largest_uncovered_ms"])
        elif min(lc["ts"] + lc["dur"], z) - max(lc["ts"], a) >= 0.5 * (z - a):
            held = min(lc["ts"] + lc["dur"], z) - max(lc["ts"], a)
            first = not any(e["name"] == nxt["name"] and e["ts"] < nxt["ts"] for e in dev)
            row.update(op=None, in_launch=True, held_ms=round(held / 1000, 3), first_of_kernel=first)
        else:
            row.update(op=None, held_ms=0.0)
        out.append(row)
    return out


def per_step_by_op(t, min_gap_ms: float = 1.0) -> dict:
    """{op: {step: idle ms held}} over the host steps (gaps outside any step under None)."""
    out: dict = {}
    for s in stalls(t, min_gap_ms):
        key = s["op"] or ("(launch call)" if s.get("in_launch") else "(no single op)")
        d = out.setdefault(key, {})
        d[s["step"]] = round(d.get(s["step"], 0.0) + s["held_ms"], 3)
    return out


def op_coverage(t, op: dict) -> dict:
    """How much of one cpu_op's span its own thread records anything under (child ops, runtime calls): an op of
    140 ms with a handful of children and 100 ms with no event under it, in an event-sampled trace, has lost
    its children (and their launches and kernels); its duration then says nothing about host work."""
    a, z = op["ts"], op["ts"] + op["dur"]
    kids = merge([(max(e["ts"], a), min(e["ts"] + e["dur"], z)) for e in t.events if e is not op
                  and e.get("tid") == op.get("tid") and a <= e["ts"] < z and e.get("cat") in ("cpu_op", "cuda_runtime")])
    edges = [a] + [x for iv in kids for x in iv] + [z]
    holes = [edges[i + 1] - edges[i] for i in range(0, len(edges) - 1, 2)]
    return {"op": op["name"], "op_ms": round(op["dur"] / 1000, 3), "children": len(kids),
            "covered_ms": round(sum(b - a for a, b in kids) / 1000, 3),
            "largest_uncovered_ms": round(max(holes) / 1000, 3) if holes else 0.0}


def sampled(t) -> dict:
    """Signs that events were dropped: device work with no correlated launch, and launches with no device work."""
    dev = [e for e in t.cat("kernel") if (e.get("args") or {}).get("correlation") is not None]
    corr_rt = {(e.get("args") or {}).get("correlation") for e in t.cat("cuda_runtime", "cuda_driver")}
    corr_dev = {(e.get("args") or {}).get("correlation") for e in t.cat(*DEVICE_CATS)}
    launches = [e for e in t.cat("cuda_runtime", "cuda_driver") if LAUNCH.match(e["name"])
                and "Memcpy" not in e["name"] and "Memset" not in e["name"]]
    return {"kernels": len(dev), "kernels_without_launch": sum((e["args"]["correlation"] not in corr_rt) for e in dev),
            "kernel_launches": len(launches),
            "launches_without_kernel": sum(((e.get("args") or {}).get("correlation") not in corr_dev) for e in launches)}
