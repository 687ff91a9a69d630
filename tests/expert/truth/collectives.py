"""Collectives across ranks: which kernels are communication, how the ranks' sequences pair, who arrives late.

Pairing is by completion time, not by position: a collective's kernels end together on every rank (none can
finish before the last one joins), so the k-th collective of one rank is the one of another rank with the same
kind whose end is nearest. A rank whose capture started late lacks the first collectives the others recorded;
its sequence then pairs at an offset, which is what `offsets` reports.
"""

from __future__ import annotations

import re

import numpy as np

COMM = re.compile(r"nccl|rccl|multimem_all_reduce|cross_device_reduce|one_shot_all_reduce|two_shot_all_reduce|"
                  r"(?<![\w])(?:dpsk::ep|deep_ep)::(?:internode|intranode|internode_ll)::", re.I)
# DeepEP's transfer kernels only: `dpsk::ep::cuda::get_dispatch_layout` is a local computation, and CUB
# kernels in a `cdpsk::ep::` namespace are compute that a substring match would take for DeepEP.


def kind(name: str) -> str:
    """The collective's kind from the kernel name (ncclDevKernel_AllReduce_Sum_f32_RING_LL -> AllReduce)."""
    m = re.search(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
    if m:
        return m.group(1)
    m = re.search(r"(?:dpsk::ep|deep_ep)::\w+::(\w+)", name)
    return m.group(1) if m else name.split("(")[0][:60]


def comm_kernels(t) -> list[tuple[str, float, float]]:
    """(kind, start us, end us) of the communication kernels, in start order."""
    return [(kind(e["name"]), e["ts"], e["ts"] + e["dur"]) for e in t.cat("kernel") if COMM.search(e["name"])]


def _pair_cost(ref, seq, off):
    diffs = []
    for i, (k, _, end) in enumerate(seq):
        j = i + off
        if 0 <= j < len(ref):
            if ref[j][0] != k:
                return float("inf")
            diffs.append(abs(ref[j][2] - end))
    return float(np.median(diffs)) if diffs else float("inf")


def offsets(traces, max_off: int = 8) -> dict:
    """Per rank: how many of the reference rank's leading collectives it lacks (0 = started with the others),
    and the median end-time error of the pairing (us). The reference is the rank with the most collectives."""
    seqs = {t.rank: comm_kernels(t) for t in traces}
    ref_rank = max(seqs, key=lambda r: (len(seqs[r]), -(r or 0)))
    ref = seqs[ref_rank]
    out = {}
    for r, s in seqs.items():
        costs = {o: _pair_cost(ref, s, o) for o in range(-max_off, max_off + 1)}
        best = min(costs, key=costs.get)
        out[r] = {"offset": best, "end_err_us": costs[best], "n": len(s),
                  "offset0_end_err_us": costs[0]}
    # a negative offset means the reference itself lacks leading collectives: renormalise to min 0
    lo = min(v["offset"] for v in out.values())
    for v in out.values():
        v["offset"] -= lo
    return out


def groups(traces) -> list[dict]:
    """The collectives every rank recorded, paired by completion time: per group the kind, each rank's
    kernel start and end, the last arriver, and each rank's wait (last start - own start, us)."""
    offs = offsets(traces)
    seqs = {t.rank: comm_kernels(t) for t in traces}
    # index in a common numbering: position + offset
    common: dict[int, dict] = {}
    for r, s in seqs.items():
        for i, (k, st, en) in enumerate(s):
            common.setdefault(i + offs[r]["offset"], {})[r] = (k, st, en)
    out = []
    for idx in sorted(common):
        g = common[idx]
        if len(g) != len(seqs):
            continue
        starts = {r: v[1] for r, v in g.items()}
        last = max(starts, key=starts.get)
        out.append({"idx": idx, "kind": next(iter(g.values()))[0], "start": starts,
                    "end": {r: v[2] for r, v in g.items()}, "last": last,
                    "wait": {r: starts[last] - starts[r] for r in starts},
                    "end_spread": max(v[2] for v in g.values()) - min(v[2] for v in g.values())})
    return out


def late_arrivals(traces, min_wait_us: float = 5000.0) -> dict:
    """Per kind of collective: how often each rank is the last to arrive, and by how much the others wait
    for it (median of the second-to-last arrival's lead), over the groups where that lead is >= min_wait_us."""
    res: dict = {}
    for g in groups(traces):
        st = sorted(g["start"].values())
        lead = st[-1] - st[-2] if len(st) > 1 else 0.0
        d = res.setdefault(g["kind"], {"groups": 0, "late": {}})
        d["groups"] += 1
        if lead >= min_wait_us:
            d["late"].setdefault(g["last"], []).append(round(lead / 1000, 2))
    return res
