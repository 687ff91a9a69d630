"""Host-backend (gloo, MPI) ring collectives whose time is not their bytes: per-exchange latency over many ranks.

Why a rule of its own: exposed_comm has nothing to offer a CPU-only rank (no compute to hide under: its gain is 0),
and low_busbw needs a device's link peak. A gloo all-reduce over n ranks is a ring of 2(n − 1) sequential
exchanges of S/n bytes each; over hundreds of ranks with messages of a few MB each exchange carries a few KB, and
the op's time is the exchanges' count, not its bytes (hta/cpu_only_rank-34: 300 ranks, 1.3 MB and 8.3 MB
all-reduces both ~170 ms, busbw 56 MB/s). The lever is fewer exchanges per step: fewer, larger all-reduces, or a
hierarchical reduction."""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.devices import host_backends
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.comm_gain import overlap_unmeasured
from llmdiag.diagnose.rules.base import Ctx

NIC_GBPS = 1.25  # one 10 Gb/s NIC, the slowest a multi-host CPU job runs on: the reference for "not its bytes"
BELOW = 0.10  # busbw under a tenth of that reference
CHUNK_MAX = 64 * 2**10  # bytes per ring exchange (S/n) at most: small enough that latency, not size, sets it
MIN_RANKS = 8  # fewer ranks: few exchanges, nothing for fewer exchanges to save
HOPS = {"allreduce": lambda n: 2 * (n - 1), "allgather": lambda n: n - 1, "reducescatter": lambda n: n - 1}


def comm_latency_bound(c: Ctx) -> list[Finding]:
    """Fires on a host-backend ring collective (all-reduce, all-gather, reduce-scatter) over ≥ MIN_RANKS ranks,
    every op sized, whose bus bandwidth is under BELOW × one 10 Gb/s NIC while each ring exchange carries at
    most CHUNK_MAX, and whose exposed time is ≥ 5 % of the step. The gain is a bound: the collectives' exposed
    time per step, the most fewer exchanges could save (the change shortens these ops and nothing else); where in
    it latency ends and a late peer's wait begins the traced rank(s) cannot tell, so no point estimate. Severity
    follows that bound like every bound's (base.graded): a rule whose collectives hold 85 % of the step is not
    low because the split of that time is unknown."""
    rows = []
    for r in c.ranks:
        if not host_backends([r.backend]) or not r.step_time_ms or not r.nsteps or overlap_unmeasured(r):
            continue
        for cc in r.comm_by_kind:
            n = cc.group_size or 0
            if cc.kind not in HOPS or n < MIN_RANKS or not cc.count or cc.sized_count != cc.count:
                continue
            msg = cc.bytes / cc.count
            if cc.busbw_gbps is None or cc.busbw_gbps >= BELOW * NIC_GBPS or msg / n > CHUNK_MAX:
                continue
            rows.append((r, cc, msg))
    if not rows:
        return []
    r, cc, msg = max(rows, key=lambda x: (x[1].total_ms - x[1].overlapped_ms) / x[0].nsteps)
    exposed = min((cc.total_ms - cc.overlapped_ms) / r.nsteps, r.exposed_comm_ms)  # ops run concurrently: a union
    if exposed < 0.05 * r.step_time_ms:
        return []
    n = cc.group_size or 0
    hops = HOPS[cc.kind](n)
    each = cc.total_ms / cc.count
    traced = c.a.world_size and len(c.ranks) < c.a.world_size
    ev = (f"rank {r.rank}: {cc.kind} over {n} ranks ({r.backend or 'host backend'}): "
          f"{fmt(cc.count / r.nsteps, 'avg')} per step, mean message {fmt(msg, 'bytes')}, {fmt(each, 'ms')} each; "
          f"busbw {fmt(cc.busbw_gbps, 'gbps')}, under a tenth of one 10 Gb/s NIC's {NIC_GBPS:g} GB/s. A ring (gloo's default algorithm) "
          f"{cc.kind} over {n} ranks is {hops} sequential exchanges of {fmt(msg / n, 'bytes')} each: "
          f"{fmt(each / hops, 'ms')} per exchange here, so its time is the exchanges' count (per-exchange latency), "
          f"not its bytes; exposed {fmt(exposed, 'ms')} per step = {fmt(exposed / r.step_time_ms, 'pct')} of the "
          f"{fmt(r.step_time_ms, 'ms')} step" + (f" ({plural(len(rows), 'collective row')} alike)" if len(rows) > 1 else "")
          + (f"; {plural(len(c.ranks), 'rank')} of {c.a.world_size} traced: a late peer looks the same"
             if traced else ""))
    act = ("fewer exchanges per step: coalesce the step's all-reduces into fewer, larger ones (flatten the tensors "
           "into one buffer, `torch.distributed.all_reduce_coalesced`, or DDP's `bucket_cap_mb` larger), reduce "
           "hierarchically (within each host first, then one rank per host: 2(h − 1) exchanges for h hosts "
           f"instead of {hops}), or synchronise less often (gradient accumulation, local SGD)"
           + ("; first compare the ranks' arrival at these collectives (trace more ranks): waiting for a late peer "
              "makes the same picture" if traced else ""))
    eg = c.gain_text(exposed, f"these {cc.kind}s' exposed time, the most fewer exchanges per step could save; how "
                     "much of each exchange is latency and how much a late peer is not in the trace", True)
    return [c.finding("comm_latency_bound", "low", f"Latency-bound {cc.kind} over {n} ranks", ev, [r.rank], [],
                      act, eg, exposed, "ranks[].comm_by_kind[].busbw_gbps", gain_kind="bound",
                      events=["gloo/MPI collective spans with Input Dims and type", "distributedInfo.pg_config"])]
