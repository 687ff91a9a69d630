"""Expert parallelism in one rank's trace: its all-to-alls with split sizes, their roles, MoE times.

Every all-to-all with split sizes (NCCL `record_param_comms` `In/Out split size`; gloo `c10d::alltoall_base_`
concrete inputs, filed under the same keys by the loader), its step and its role: `dispatch` / `combine` from
the enclosing `llmdiag/moe/*` label, else from the splits (a foreign trace: an all-to-all that returns exactly
what an earlier one received is its combine; see `_pair_by_transpose`). Times per step: dispatch and combine
(labels, or DeepEP-style kernels named `...dispatch` / `...combine`), expert compute (`llmdiag/moe/experts`
spans, or compute between a dispatch kernel and the next combine kernel), all-to-all communication and its
part not overlapped with compute. Across ranks: job/moe.py."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import numpy as np

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.io.trace import ANNOTATION, COMM, COMPUTE, RankTrace
from llmdiag.diagnose.metrics.rank import intervals as iv
from llmdiag.diagnose.metrics.rank.classify import collective_kind
from llmdiag.diagnose.metrics.rank.launches import launch_ts

LABELS = {"llmdiag/moe/dispatch": "dispatch", "llmdiag/moe/combine": "combine", "llmdiag/moe/experts": "experts"}
_EP_KERNEL = re.compile(r"deep_ep::|dpsk::ep::")


@dataclass
class A2AOp:
    """One all-to-all of a step on this rank: its MoE role and the rows it sent to and received from each peer."""

    step: int  # window index
    ts: int  # ns, relative
    role: str  # dispatch, combine, a2a (role unknown)
    sent: list[int]
    received: list[int]
    group: list[int] | None  # global ranks in split order, None when the trace does not say


@dataclass
class RankMoe:
    """One rank's expert parallelism: its all-to-alls and the per-step time of dispatch, combine and experts."""

    rank: int
    nsteps: int
    ops: list[A2AOp] = field(default_factory=list)
    labelled: bool = False
    dispatch_ms: float = 0.0  # per step
    combine_ms: float = 0.0
    expert_ms: float = 0.0
    a2a_ms: float = 0.0
    a2a_exposed_ms: float = 0.0
    step_ms: float = 0.0
    kernels: bool = False  # DeepEP-style kernels seen


def _ints(v) -> list[int] | None:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        return v
    return None


def _spans(t: RankTrace, name: str, device: bool) -> iv.Union:
    """Union of one label's spans on the host (user_annotation) or the device (gpu_user_annotation) side."""
    ids = t.name_ids(lambda n: n == name)
    m = np.isin(t.name, ids) & (t.kind == ANNOTATION) if len(ids) else np.zeros(len(t), bool)
    m &= (t.stream >= 0) if device else (t.stream < 0)
    return iv.union(t.ts[m], (t.ts + t.dur)[m])


def _ep_group_of(dist: dict, rank: int | None, n: int) -> list[int] | None:
    """The group an n-way all-to-all of this rank runs in: `mesh_ep` in pg_config, else the only n-rank group."""
    cands = []
    for g in dist.get("pg_config") or []:
        ranks = g.get("ranks") if isinstance(g, dict) else None
        if isinstance(ranks, list) and len(ranks) == n and rank in ranks and all(isinstance(r, int) for r in ranks):
            cands.append((g.get("pg_desc") != "mesh_ep", ranks))
    cands.sort(key=lambda c: c[0])
    return list(cands[0][1]) if cands else None


def _group_from_args(args: dict, dist: dict, rank, n: int) -> list[int] | None:
    ranks = _ints(args.get("Process Group Ranks"))
    if ranks and len(ranks) == n:
        return ranks
    name = str(args.get("Process Group Name", ""))
    for g in dist.get("pg_config") or []:
        if isinstance(g, dict) and str(g.get("pg_name")) == name and isinstance(g.get("ranks"), list) \
                and len(g["ranks"]) == n:
            return list(g["ranks"])
    return _ep_group_of(dist, rank, n)


def rank_moe(t: RankTrace, wins) -> RankMoe | None:
    """This rank's MoE traffic and times; None when it ran no all-to-all and no MoE label or EP kernel."""
    rank = t.rank if t.rank is not None else -1
    out = RankMoe(rank, max(1, len(wins)))
    dist = t.distributed
    host, device = [], []  # record_param_comms (host) and the kernels that may repeat its args: one of the two
    for i, args in t.comm_args.items():
        if collective_kind(t.names[t.name[i]], args) != "alltoall":
            continue
        sent, recv = _ints(args.get("In split size")), _ints(args.get("Out split size"))
        if sent and recv and len(sent) == len(recv):
            ts = launch_ts(t, i)
            (host if t.stream[i] < 0 else device).append((ts, sent, recv, _group_from_args(args, dist, t.rank,
                                                                                          len(sent))))
    raw = sorted(host or device, key=lambda x: x[0])

    role_u = {role: _spans(t, name, False) for name, role in LABELS.items()}
    out.labelled = any(len(u[0]) for u in role_u.values())
    # Times: on GPU the labels' device-side spans (Kineto's gpu_user_annotation), on CPU the host spans.
    dev_u = {role: _spans(t, name, True) for name, role in LABELS.items()}
    label_u = dev_u if any(len(u[0]) for u in dev_u.values()) else role_u
    ep_ids = t.name_ids(lambda n: bool(_EP_KERNEL.search(n)))
    kern = np.isin(t.name, ep_ids) & (t.stream >= 0) if len(ep_ids) else np.zeros(len(t), bool)
    out.kernels = bool(kern.any())
    if not raw and not out.labelled and not out.kernels:
        return None

    end = t.ts + t.dur
    hs = np.array([w.host_start for w in wins], np.int64)
    for ts, sent, recv, group in raw:
        step = int(np.searchsorted(hs, ts, side="right")) - 1
        if step < 0 or ts >= wins[step].host_end:
            continue
        role = "a2a"
        if out.labelled:
            role = next((r for r in ("dispatch", "combine") if _inside(role_u[r], ts)), "other")
        out.ops.append(A2AOp(step, ts, role, sent, recv, group))
    if not out.labelled:
        _pair_by_transpose(out.ops)

    compute = iv.union(t.ts[t.kind == COMPUTE], end[t.kind == COMPUTE])
    names = t.names
    a2a_ids = t.name_ids(lambda n: collective_kind(n) == "alltoall" or bool(_EP_KERNEL.search(n)))
    a2a = (t.kind == COMM) & np.isin(t.name, a2a_ids)
    for i, args in t.comm_args.items():  # NCCL kernels named SendRecv under an all_to_all host op
        if t.kind[i] == COMM and collective_kind(names[t.name[i]], args) == "alltoall":
            a2a[i] = True
    a2a_u = iv.union(t.ts[a2a], end[a2a])
    exposed_u = iv.difference(a2a_u, compute)
    if out.kernels:
        disp = kern & np.isin(t.name, t.name_ids(lambda n: "dispatch" in n.rsplit("(", 1)[0].lower()))
        comb = kern & np.isin(t.name, t.name_ids(lambda n: "combine" in n.rsplit("(", 1)[0].lower()))
        label_u["dispatch"] = iv.union_of(label_u["dispatch"], iv.union(t.ts[disp], end[disp]))
        label_u["combine"] = iv.union_of(label_u["combine"], iv.union(t.ts[comb], end[comb]))
        if not len(label_u["experts"][0]):
            label_u["experts"] = _between(t, disp, comb)
    label_u["experts"] = iv.difference(label_u["experts"], iv.difference(label_u["experts"], compute))
    tot = defaultdict(int)
    for w in wins:
        tot["step"] += w.end - w.start
        for key, u in (("dispatch", label_u["dispatch"]), ("combine", label_u["combine"]),
                       ("experts", label_u["experts"]), ("a2a", a2a_u), ("exposed", exposed_u)):
            tot[key] += iv.total(iv.within(u, w.start, w.end))
    n = out.nsteps * 1e6
    out.dispatch_ms, out.combine_ms, out.expert_ms = tot["dispatch"] / n, tot["combine"] / n, tot["experts"] / n
    out.a2a_ms, out.a2a_exposed_ms, out.step_ms = tot["a2a"] / n, tot["exposed"] / n, tot["step"] / n
    return out


def _pair_by_transpose(ops: list[A2AOp]) -> None:
    """Unlabelled traces: an all-to-all that sends back exactly what an earlier unpaired one of its step received
    (splits transposed) is that one's combine; the earlier one is a dispatch. Backward repeats the pattern
    (the combine's gradient goes out with the dispatch's splits), so without labels forward and backward
    dispatches both count; ops that pair with nothing stay `a2a` and are not counted."""
    open_: list[A2AOp] = []
    for op in ops:
        match = next((o for o in reversed(open_) if o.step == op.step and o.received == op.sent
                      and o.sent == op.received and o.group == op.group), None)
        if match is not None:
            match.role, op.role = "dispatch", "combine"
            open_.remove(match)
        else:
            open_.append(op)



def _inside(u: iv.Union, ts: int) -> bool:
    s, e = u
    k = int(np.searchsorted(s, ts, side="right")) - 1
    return k >= 0 and ts < e[k]


def _between(t: RankTrace, disp: np.ndarray, comb: np.ndarray) -> iv.Union:
    """[end of each dispatch kernel, start of the next combine kernel]: where that layer's experts run."""
    d_end = np.sort((t.ts + t.dur)[disp])
    c_start = np.sort(t.ts[comb])
    starts, ends = [], []
    for de in d_end.tolist():
        k = int(np.searchsorted(c_start, de, side="left"))
        if k < len(c_start):
            starts.append(de)
            ends.append(int(c_start[k]))
    return iv.union(np.array(starts, np.int64), np.array(ends, np.int64))


