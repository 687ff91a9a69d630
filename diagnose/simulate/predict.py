"""The cost model behind the pipeline predictions at other microbatch counts (same global batch), fitted from
the one run: every number is an estimate (docs/simulation.md, "Predicting other microbatch counts").

Per stage and action kind (F; B with I and W), one microbatch's action costs
    overhead + fixed + variable · m / m'
- `fixed`: the action's size-independent time the per-rank job read from its ops
  (diagnose.metrics.action_costs: Python between ops, data-free ops, the autograd engine's bookkeeping, one
  dispatch per other op; where GEMMs record their shapes, each GEMM's call cost and a grad-weight GEMM's
  output term from a fit over the run's own GEMM shapes, diagnose.metrics.op_scaling);
- `variable`: the rest of the measured action time, which scales with the microbatch size m/m';
- `overhead`: host time on the rank between the action's input arriving (its recv completing, or the previous
  action ending) and the action starting: the schedule's own per-action work, kept per action.
A message between neighbouring stages is a node on the dependency edge costing latency + bytes / bandwidth,
fitted per link (stage pair) from the run's matched send/recv transfers (recv end − later post: waiting
excluded), bytes scaled by m/m'. With one message size per link (a pipeline sends equal activations and
gradients) latency and bandwidth cannot be told apart: the whole transfer is then taken as latency.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from llmdiag.diagnose.model.format import NS_PER_MS

Link = tuple[int, int]  # (source stage, destination stage)
SAMPLES = 64  # replays averaged where actions vary (replay.replay's `spread`)


@dataclass
class CostModel:
    fixed: dict[tuple[int, str], float]  # (stage, F|B) -> ms per microbatch action at the run's m
    variable: dict[tuple[int, str], float]
    overhead: dict[tuple[int, str], float]
    links: dict[Link, tuple[float, float, float]] = field(default_factory=dict)  # latency ms, ms/byte, bytes at m
    # (stage, F|B) -> each action's deviation (ms) from what its step and its microbatch explain (_spread): how
    # much the run's actions vary, kept as is at every m (the deviations did not shrink with the actions)
    spread: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)

    def durations(self, m: int, m2: int) -> tuple[dict[tuple[int, str], float], dict[Link, float]]:
        """Per (stage, F|B) the action cost and per link the message cost at m2 microbatches."""
        cost = {k: self.overhead.get(k, 0.0) + self.fixed.get(k, 0.0) + v * m / m2 for k, v in self.variable.items()}
        links = {k: lat + per_b * nb * m / m2 for k, (lat, per_b, nb) in self.links.items()}
        return cost, links

    def describe(self, m: int) -> str:
        fx = sum(self.fixed.values()) + sum(self.overhead.values())
        tot = fx + sum(self.variable.values())
        lk = ", ".join(f"{s}→{d} {lat:.2f} ms + {nb / 1e6:.2f} MB at {1 / pb / 1e6:.1f} MB/ms" if pb > 0
                       else f"{s}→{d} {lat:.2f} ms" for (s, d), (lat, pb, nb) in sorted(self.links.items()))
        return (f"Estimate: per-microbatch fixed cost {fx:.1f} of {tot:.1f} ms of actions at m={m} "
                f"(host time between ops, data-free ops, autograd bookkeeping, op dispatch, per-action host overhead; "
                f"GEMM call and grad-weight output terms fitted over the run's GEMM shapes where they are recorded), "
                f"the rest scaled by "
                f"microbatch size; " + (f"messages per link: {lk}." if lk else "communication free (no transfers read).")
                + (f" Each prediction is the mean of {SAMPLES} replays, every action varying as the run's did "
                   f"(±{dev:.1f} ms mean absolute deviation)." if (dev := self.mean_deviation()) else ""))

    def mean_deviation(self) -> float:
        """Mean absolute deviation (ms) of the run's actions from what their step and microbatch explain."""
        allv = [abs(x) for v in self.spread.values() for x in v.tolist()]
        return sum(allv) / len(allv) if allv else 0.0


def fit(actions: dict[int, list], fixed_ns: dict[int, list[int]], host: dict[int, list], shift_ns: dict[int, int],
        group: list[int], m: int) -> CostModel:
    """`actions[r]` the rank's Actions (stage, kind, step, start, end; rank-relative ns), `fixed_ns[r]` aligned
    with them (may be empty), `host[r]` its (send|recv, start, end, bytes) records, `shift_ns[r]` its clock
    offset to the common clock."""
    tot: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    over: dict[tuple[int, str], list[float]] = defaultdict(list)
    stage_of, last = {}, max((a.stage for r in group for a in actions.get(r, [])), default=0)
    for r in group:
        acts = actions.get(r, [])
        if not acts:
            continue
        stage_of[r] = acts[0].stage
        steps = max(len({a.step for a in acts}), 1)
        fx = fixed_ns.get(r) or [0] * len(acts)
        for a, f in zip(acts, fx):
            k = (a.stage, "B" if a.kind in ("B", "I", "W") else "F")
            tot[k][0] += f / NS_PER_MS / steps / m
            tot[k][1] += (a.end - a.start - f) / NS_PER_MS / steps / m
        recv_ends = sorted(e for kind, _, e, _ in host.get(r, []) if kind == "recv")
        by_step = defaultdict(list)
        for a in acts:
            by_step[a.step].append(a)
        for seq in by_step.values():
            seq.sort(key=lambda a: a.start)
            for prev, a in zip(seq, seq[1:]):
                ready = prev.end
                needs = (a.kind == "F" and a.stage > 0) or (a.kind in ("B", "I") and a.stage < last)
                if needs:  # its input's arrival: the last recv completed before it starts (none read: no evidence)
                    i = int(np.searchsorted(recv_ends, a.start, "right")) - 1
                    if i < 0:
                        continue
                    ready = max(ready, recv_ends[i])
                over[(a.stage, "B" if a.kind in ("B", "I", "W") else "F")].append(max(a.start - ready, 0) / NS_PER_MS)
    # overhead per action, counted once per microbatch action of the kind (W and I fold into B: mean × share)
    overhead = {k: float(np.mean(v)) * _share(actions, group, k) for k, v in over.items() if v}
    model = CostModel({k: v[0] for k, v in tot.items()}, {k: v[1] for k, v in tot.items()}, overhead)
    model.links = _links(actions, host, shift_ns, group, stage_of, last)
    model.spread = _spread(actions, group)
    return model


def _spread(actions, group) -> dict[tuple[int, str], np.ndarray]:
    """Per (stage, F|B) the deviations (ms) of its actions that neither the step nor the microbatch explains:
    over each (stage, kind)'s table of steps × microbatches, duration − step mean − microbatch mean + the
    table's mean. A step slower than the others (the machine) and a microbatch slower in every step (work the
    first or last one always does) are not variation."""
    tables: dict[tuple, dict[tuple[int, int], float]] = defaultdict(dict)
    for r in group:
        for a in actions.get(r, []):
            tables[(a.stage, a.kind)][(a.step, a.microbatch)] = (a.end - a.start) / NS_PER_MS
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    for (stage, kind), cells in tables.items():
        steps, mbs = sorted({k[0] for k in cells}), sorted({k[1] for k in cells})
        if len(steps) < 2 or len(mbs) < 2 or len(cells) != len(steps) * len(mbs):
            continue  # nothing to tell variation from the step's or the microbatch's own cost
        t = np.array([[cells[(st, mb)] for mb in mbs] for st in steps])
        dev = t - t.mean(axis=1, keepdims=True) - t.mean(axis=0, keepdims=True) + t.mean()
        out[(stage, "B" if kind in ("B", "I", "W") else "F")] += dev.ravel().tolist()
    return {k: np.array(v) for k, v in out.items()}


def _share(actions, group, key) -> float:
    """Actions of the kind per microbatch on that stage (1 for F and B; 2 where B is split into I and W)."""
    s, k = key
    n = sum(1 for r in group for a in actions.get(r, []) if a.stage == s and ("B" if a.kind in ("B", "I", "W") else "F") == k)
    mb = len({(a.step, a.microbatch) for r in group for a in actions.get(r, []) if a.stage == s})
    return n / mb if mb else 1.0


def _links(actions, host, shift_ns, group, stage_of, last) -> dict[Link, tuple[float, float, float]]:
    """Sends read by the action before them (after F: to the next stage; after B/I: to the previous), recvs by
    the action after them (before F: from the previous stage; before B/I: from the next); the n-th send of a
    link with the n-th recv; transfer = recv end − the later post, on the common clock."""
    sends: dict[Link, list] = defaultdict(list)
    recvs: dict[Link, list] = defaultdict(list)
    for r in group:
        acts = sorted(actions.get(r, []), key=lambda a: a.start)
        if not acts or r not in stage_of:
            continue
        starts = [a.start for a in acts]
        sh = shift_ns.get(r, 0)
        s = stage_of[r]
        for kind, st, en, nb in host.get(r, []):
            if kind == "send":
                i = int(np.searchsorted(starts, st, "right")) - 1
                if i < 0:
                    continue
                dst = s + 1 if acts[i].kind == "F" else s - 1
                sends[(s, dst)].append((st + sh, en + sh, nb))
            else:
                i = int(np.searchsorted(starts, st, "left"))
                if i >= len(acts):
                    continue
                src = s - 1 if acts[i].kind == "F" else s + 1
                recvs[(src, s)].append((st + sh, en + sh, nb))
    out = {}
    for link in sorted(set(sends) & set(recvs)):
        if not (0 <= link[0] <= last and 0 <= link[1] <= last):
            continue
        pairs = list(zip(sends[link], recvs[link]))
        y = np.array([max(rv[1] - max(sd[0], rv[0]), 0) / NS_PER_MS for sd, rv in pairs])
        b = np.array([float(rv[2]) for _, rv in pairs])
        out[link] = (*_latency_bandwidth(b, y), float(np.median(b)))
    return out


def _latency_bandwidth(b: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least squares y = latency + b · per_byte (both ≥ 0) where the sizes differ by at least 2×; else the
    median transfer as latency alone (one size cannot separate them)."""
    if len(b) >= 3 and b.min() > 0 and b.max() >= 2 * b.min():
        per_b, lat = np.polyfit(b, y, 1)
        if per_b >= 0 and lat >= 0:
            return float(lat), float(per_b)
        if per_b < 0:
            return float(np.median(y)), 0.0
        return 0.0, float(np.sum(y * b) / np.sum(b * b))
    return float(np.median(y)) if len(y) else 0.0, 0.0
