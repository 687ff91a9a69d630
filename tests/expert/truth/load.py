"""Reading traces: one Trace per file, grouped into runs (a folder may hold several complete runs)."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field


OLD_CATS = {"Kernel": "kernel", "Runtime": "cuda_runtime", "Operator": "cpu_op", "Memcpy": "gpu_memcpy",
            "Memset": "gpu_memset", "Python": "python_function"}  # the 2021 schema's names


@dataclass
class Trace:
    path: str
    rank: int | None
    world: int | None
    events: list            # complete events (ph == "X") with ts/dur, sorted by ts
    meta: dict = field(default_factory=dict)  # everything but traceEvents
    instants: list = field(default_factory=list)  # ph == "i" events (memory events among them)
    base_ts: float = 0.0    # the trace's baseTimeNanoseconds / 1000 when present, else 0

    def cat(self, *cats: str) -> list:
        return [e for e in self.events if e.get("cat") in cats]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def read(path: str) -> Trace:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        d = json.load(f)
    if isinstance(d, list):
        d = {"traceEvents": d}
    evs = d.get("traceEvents") or []
    xs, inst = [], []
    for e in evs:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "X" and "ts" in e:
            e["ts"] = float(e["ts"])
            e["dur"] = float(e.get("dur") or 0.0)
            e["cat"] = OLD_CATS.get(e.get("cat"), e.get("cat"))
            xs.append(e)
        elif ph == "i":
            inst.append(e)
    xs.sort(key=lambda e: e["ts"])
    meta = {k: v for k, v in d.items() if k != "traceEvents"}
    di = meta.get("distributedInfo") or {}
    rank = di.get("rank") if isinstance(di.get("rank"), int) else None
    world = di.get("world_size") if isinstance(di.get("world_size"), int) else None
    return Trace(path, rank, world, xs, meta, inst)


def trace_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    out = []
    for root, _, files in os.walk(path):
        out += [os.path.join(root, f) for f in files if f.endswith((".json", ".json.gz"))]
    return sorted(out)


def runs(path: str) -> list[list[Trace]]:
    """The traces of a folder, split into runs: a rank seen twice starts a new run. Runs are told apart by the
    wall-clock start of their events (two runs of one job, minutes apart, do not overlap in time)."""
    traces = [read(f) for f in trace_files(path)]
    traces.sort(key=lambda t: t.events[0]["ts"] if t.events else 0.0)
    groups: list[list[Trace]] = []
    for t in traces:
        if groups and (t.rank is None or t.rank not in {u.rank for u in groups[-1]}) and \
                (not t.events or not groups[-1][0].events or t.events[0]["ts"] - groups[-1][0].events[0]["ts"] < 30e6):
            groups[-1].append(t)
        else:
            groups.append([t])
    for g in groups:
        g.sort(key=lambda t: (t.rank is None, t.rank))
    return groups
