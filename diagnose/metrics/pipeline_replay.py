"""Replay of a pipeline schedule's dependency graph with measured durations and free communication.

Each rank runs its actions in a fixed order; F(s, mb) waits for F(s−1, mb), B/I(s, mb) for F(s, mb) and
B/I(s+1, mb), W(s, mb) for B/I(s, mb). The makespan and idle time of this replay are the schedule's
inherent bubble given the measured stage costs: measured − replay is what communication, host overhead
and noise add; replay − formula is what stage imbalance adds. The same engine, fed with generated orders,
predicts other microbatch counts and schedules.
"""

from __future__ import annotations

from dataclasses import dataclass

Key = tuple[int, str, int]  # (stage, kind, microbatch)


@dataclass
class ReplayResult:
    makespan: float
    busy: dict[int, float]  # rank -> busy time
    bubble: dict[int, float]  # rank -> 1 − busy / makespan


def replay(orders: dict[int, list[Key]], dur: dict[Key, float], last_stage: int) -> ReplayResult | None:
    """Simulate; None if the orders deadlock (an order that the dependencies cannot satisfy)."""
    end: dict[Key, float] = {}
    free = {r: 0.0 for r in orders}
    pos = {r: 0 for r in orders}
    remaining = sum(len(o) for o in orders.values())
    while remaining:
        progressed = False
        for r, order in orders.items():
            while pos[r] < len(order):
                a = order[pos[r]]
                deps = _deps(a, last_stage, dur)
                if any(d not in end for d in deps):
                    break
                start = max([free[r]] + [end[d] for d in deps])
                end[a] = start + dur.get(a, 0.0)
                free[r] = end[a]
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            return None
    makespan = max(free.values()) if free else 0.0
    busy = {r: sum(dur.get(a, 0.0) for a in o) for r, o in orders.items()}
    bubble = {r: (1 - busy[r] / makespan) if makespan > 0 else 0.0 for r in orders}
    return ReplayResult(makespan, busy, bubble)


def _deps(a: Key, last_stage: int, dur: dict[Key, float]) -> list[Key]:
    s, k, mb = a
    if k == "F":
        return [(s - 1, "F", mb)] if s > 0 else []
    if k in ("B", "I"):
        deps = [(s, "F", mb)]
        if s < last_stage:
            nxt = (s + 1, "I", mb) if (s + 1, "I", mb) in dur else (s + 1, "B", mb)
            deps.append(nxt)
        return deps
    if k == "W":
        return [(s, "I", mb)] if (s, "I", mb) in dur else [(s, "B", mb)]
    return []


def generate_order(schedule: str, stage: int, p: int, m: int) -> list[Key] | None:
    """The action order of one stage (one stage per rank) for gpipe or 1f1b; None for others."""
    s = schedule.lower()
    if s == "gpipe":
        return [(stage, "F", i) for i in range(m)] + [(stage, "B", i) for i in range(m)]
    if s == "1f1b":
        warm = min(p - 1 - stage, m)
        order = [(stage, "F", i) for i in range(warm)]
        for i in range(m - warm):
            order += [(stage, "F", warm + i), (stage, "B", i)]
        order += [(stage, "B", i) for i in range(m - warm, m)]
        return order
    return None


def predict(schedule: str, p: int, m: int, stage_cost: dict[tuple[int, str], float]) -> ReplayResult | None:
    """Replay `schedule` at m microbatches; stage_cost is the time of one microbatch's F or B per stage."""
    orders = {}
    for s in range(p):
        o = generate_order(schedule, s, p, m)
        if o is None:
            return None
        orders[s] = o
    dur = {(s, k, i): stage_cost.get((s, k), 0.0) for s in range(p) for k in ("F", "B") for i in range(m)}
    return replay(orders, dur, p - 1)
