"""The host side: blocking runtime calls, allocator calls, and host stalls with no profiled op under them."""

from __future__ import annotations

import re

from .steps import host_steps

BLOCKING = re.compile(r"^(cuda|hip)(Memcpy|MemcpyWithStream|Memcpy2D|DeviceSynchronize|StreamSynchronize|"
                      r"EventSynchronize|Memset)$")
ALLOC = re.compile(r"^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync|MallocManaged|HostAlloc|FreeHost)$")


def runtime_calls(t, pattern) -> list[dict]:
    return [e for e in t.cat("cuda_runtime", "cuda_driver", "hip_runtime", "runtime")
            if pattern.match(e["name"])]


def blocking_summary(t) -> dict:
    """Per blocking call name: count, total and max duration (ms)."""
    out: dict = {}
    for e in runtime_calls(t, BLOCKING):
        d = out.setdefault(e["name"], {"count": 0, "total_ms": 0.0, "max_ms": 0.0})
        d["count"] += 1
        d["total_ms"] += e["dur"] / 1000
        d["max_ms"] = max(d["max_ms"], e["dur"] / 1000)
    for d in out.values():
        d["total_ms"], d["max_ms"] = round(d["total_ms"], 3), round(d["max_ms"], 3)
    return out


def alloc_per_step(t) -> dict:
    """cudaMalloc / cudaFree (hip*) calls and their time per ProfilerStep; 'outside' for calls in no step."""
    steps = host_steps(t)
    out: dict = {}
    for e in runtime_calls(t, ALLOC):
        key = next((n for n, s, d in steps if s <= e["ts"] < s + d), "outside")
        d = out.setdefault(key, {})
        c = d.setdefault(e["name"], [0, 0.0])
        c[0] += 1
        c[1] = round(c[1] + e["dur"] / 1000, 3)
    return out


def host_threads(t) -> dict:
    """tid -> total cpu_op time (us), to find the main (busiest) thread."""
    out: dict = {}
    for e in t.cat("cpu_op", "user_annotation", "cuda_runtime", "python_function"):
        out[e.get("tid")] = out.get(e.get("tid"), 0.0) + e["dur"]
    return out


def host_gaps(t, min_gap_us: float = 50_000.0) -> list[dict]:
    """Gaps on the main host thread longer than min_gap_us with no profiled event under them (inside the
    steps): a host stall the profiler cannot attribute (sleep, GIL, I/O, a lock, an unprofiled library)."""
    th = host_threads(t)
    if not th:
        return []
    main = max(th, key=th.get)
    evs = [e for e in t.events if e.get("tid") == main and e.get("cat") in
           ("cpu_op", "cuda_runtime", "cuda_driver", "python_function")
           and not str(e.get("name", "")).startswith("ProfilerStep")]  # annotations span stalls: leaf kinds only
    steps = host_steps(t)
    out = []
    end = None
    for e in evs:
        if end is not None and e["ts"] - end >= min_gap_us:
            step = next((n for n, s, d in steps if s <= end < s + d), None)
            if step is not None:
                out.append({"step": step, "start": end, "gap_ms": round((e["ts"] - end) / 1000, 3),
                            "after": prev_name, "before": e["name"]})
        if end is None or e["ts"] + e["dur"] > end:
            end = e["ts"] + e["dur"]
            prev_name = e["name"]
    return out
