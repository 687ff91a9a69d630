"""Memory events ([memory] instants): which device types they are on, and the device-side peak."""

from __future__ import annotations


def memory_events(t) -> dict:
    """Count of [memory] events per Device Type (0 = CPU, 1 = CUDA/HIP) and the peak 'Total Allocated' per
    device type (bytes). A device peak must come from Device Type 1 events only."""
    out: dict = {}
    for e in t.instants:
        if e.get("name") != "[memory]":
            continue
        a = e.get("args") or {}
        dt = a.get("Device Type")
        d = out.setdefault(dt, {"events": 0, "peak_total_allocated": 0})
        d["events"] += 1
        ta = a.get("Total Allocated")
        if isinstance(ta, (int, float)):
            d["peak_total_allocated"] = max(d["peak_total_allocated"], int(ta))
    return out


def python_functions(t) -> int:
    """python_function events: the trace was recorded with with_stack=True (host times inflated)."""
    return sum(1 for e in t.events if e.get("cat") == "python_function")
