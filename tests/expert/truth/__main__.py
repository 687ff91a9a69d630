"""`python -m tests.expert.truth PATH [--json]`: every claim kind computed for the runs under PATH."""

from __future__ import annotations

import json
import sys

from . import collectives, host, kernels, memory, steps
from .load import runs


def truth(path: str, gap_ms: float = 5.0) -> list[dict]:
    out = []
    for g in runs(path):
        t0 = min(t.events[0]["ts"] for t in g if t.events) if any(t.events for t in g) else 0.0
        multi = len(g) > 1 and any(collectives.comm_kernels(t) for t in g)
        r = {"files": [t.name for t in g], "ranks": [t.rank for t in g], "world": g[0].world,
             "device": kernels.device(g[0]), "steps": steps.summary(g), "per_rank": {}}
        if multi:
            r["collective_offsets"] = collectives.offsets(g)
            r["late_arrivals_ms"] = collectives.late_arrivals(g, 3000.0)
        for t in g:
            first_coll = next(iter(collectives.comm_kernels(t)), None)
            r["per_rank"][t.rank] = {
                "first_event_ms": round((t.events[0]["ts"] - t0) / 1000, 3) if t.events else None,
                "first_collective_ms": round((first_coll[1] - t0) / 1000, 3) if first_coll else None,
                "n_collectives": len(collectives.comm_kernels(t)),
                "blocking": host.blocking_summary(t), "alloc_per_step": host.alloc_per_step(t),
                "host_gaps": host.host_gaps(t, gap_ms * 1000), "kernels": kernels.shares(t),
                "comm_namespaces": kernels.comm_namespaces(t), "memory": memory.memory_events(t),
                "python_function": memory.python_functions(t)}
        out.append(r)
    return out


if __name__ == "__main__":
    res = truth(sys.argv[1])
    print(json.dumps(res, indent=1, default=str))
