"""Expert-parallel (MoE) rules: token imbalance across the EP group, exposed dispatch/combine, EP across nodes.

All read `Analysis.moe` (diagnose.metrics.moe); they stay silent on traces without expert parallelism.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.devices import host_backends
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where
from llmdiag.diagnose.rules.comm_gain import overlap_unmeasured

IMBALANCE_FLOOR = 1.25  # max/mean rows per rank: below this, routing noise (a learned router at init: ~1.02-1.15)
EXPOSED_FLOOR = 0.05  # exposed all-to-all as a share of the step
# Per-GPU bandwidth inside a node vs across nodes, for the cross-node estimate: NVLink 4 (H100, 450 GB/s per
# direction) vs one 400 Gb/s NIC per GPU (50 GB/s); DeepSeek-V3's paper uses the same ~1:9 ratio.
INTRA_OVER_INTER = 9.0


def moe_imbalance(c: Ctx) -> list[Finding]:
    """One EP rank receives far more tokens than the mean: its experts set the pace of every MoE layer."""
    m = c.a.moe
    if not m:
        return []
    if m.source == "split sizes" and m.imbalance is not None and m.imbalance >= IMBALANCE_FLOOR:
        imb, hot = m.imbalance, m.hot_rank
        group = next((g for g in m.groups if hot in g), [])
        recv = {r.rank: r.received for r in m.ranks if r.rank in group}
        mean = sum(recv.values()) / len(recv) if recv else 0
        worst = max(m.layers, key=lambda x: x.imbalance, default=None)
        ev = (f"rank {hot} receives {fmt(recv.get(hot, 0), 'int')} token copies per step from the all-to-all split "
              f"sizes vs a mean of {fmt(mean, 'int')} over EP group {group} (max/mean {fmt(imb, 'x')})")
        if worst:
            ev += f"; worst MoE layer: dispatch #{worst.layer} of step {worst.step}, max/mean {fmt(worst.imbalance, 'x')}"
        metric, ranks = "moe.imbalance", [hot]
    elif m.source == "kernels" and m.expert_imbalance is not None and m.expert_imbalance >= IMBALANCE_FLOOR:
        imb, hot = m.expert_imbalance, m.slow_expert_rank
        ev = (f"expert compute on rank {hot} takes {fmt(m.rank(hot).expert_ms, 'ms')} per step, "
              f"max/mean {fmt(imb, 'x')} over the EP ranks (no split sizes in the trace: times only)")
        metric, ranks = "moe.expert_imbalance", [hot]
    else:
        return []
    hot_r = m.rank(hot)
    gain = hot_r.expert_ms * (1 - 1 / imb) if hot_r and hot_r.expert_ms > 0 else None
    how = (f"the hottest rank's expert compute ({fmt(hot_r.expert_ms, 'ms')}) brought to the group mean, "
           "which the other ranks now wait for in combine") if gain else ""
    eg = c.gain_text(gain, how) if gain else "not quantified: no expert compute time in the trace"
    sev = severity_for(gain, c.step_ms)  # the one rule of the gain (docs/recommendations.md "Severity")
    action = ("balance the routing: a capacity factor (`--moe-capacity 1.25` drops the overflow), a larger "
              "balance-loss weight (`--moe-aux-weight`), or DeepSeek-V3's loss-free bias balancing; if the skew is "
              "in the data, replicate the hot experts (EPLB)")
    return [c.finding("moe_imbalance", sev, "Expert load imbalance across the EP group", ev, ranks,
                      steps_where(c.ranks), action, eg, gain, metric, events=["all_to_all split sizes",
                                                                             "llmdiag/moe/experts"])]


def moe_exposed_a2a(c: Ctx) -> list[Finding]:
    """Dispatch/combine all-to-alls that no compute hides."""
    m = c.a.moe
    if not m or m.a2a_exposed_frac < EXPOSED_FLOOR:
        return []
    sampled = {r.rank for r in c.ranks if overlap_unmeasured(r)}  # event-sampled: their exposure not measured
    ranks = [r for r in m.ranks if r.step_ms > 0 and r.rank not in sampled]
    frac = m.a2a_exposed_frac if not sampled else (  # over the measured ranks, as metrics/job/moe.py takes it
        sum(r.a2a_exposed_ms / r.step_ms for r in ranks) / len(ranks) if ranks else 0.0)
    if frac < EXPOSED_FLOOR:
        return []
    exposed = sum(r.a2a_exposed_ms for r in ranks) / len(ranks)
    total = sum(r.a2a_ms for r in ranks) / len(ranks)
    ev = (f"all-to-all {fmt(total, 'ms')} per step, {fmt(exposed, 'ms')} exposed ({fmt(frac, 'pct')} "
          f"of the step, mean over {len(ranks)} EP ranks); dispatch + combine take {fmt(m.dispatch_combine_frac, 'pct')}"
          " of the step")
    if c.dev == "CPU" and host_backends(r.backend for r in c.ranks):  # DeepEP (NVSHMEM), DualPipe, Megatron's
        # flag are GPU tools: not for a gloo run (an nccl job whose capture lacks GPU activity ran on GPUs)
        action = ("overlap dispatch/combine with compute: split the batch in two micro-batches whose attention/experts "
                  "run while the other's tokens travel, each all-to-all issued with `async_op=True` and waited on "
                  "just before its tokens are used; on CPU (gloo) the exchange and the compute share the cores, so "
                  "less of it hides than the bound below")
    else:
        action = ("overlap dispatch/combine with compute: split the batch in two micro-batches whose attention/"
                  "experts run while the other's tokens travel (DualPipe, DeepEP's hook-based overlap, Megatron "
                  "`--overlap-moe-expert-parallel-comm`)")
    return [c.finding("moe_exposed_a2a", severity_for(exposed, c.step_ms), "Exposed MoE dispatch/combine", ev,
                      [r.rank for r in ranks], steps_where(c.ranks), action,
                      c.gain_text(exposed, "the exposed all-to-all hidden under compute", bound=True), exposed,
                      "moe.a2a_exposed_frac", gain_kind="bound")]


def moe_cross_node(c: Ctx) -> list[Finding]:
    """An EP group spans hosts: token copies cross the NIC instead of NVLink."""
    m = c.a.moe
    if not m or not m.cross_node_groups or not m.send_matrix:
        return []
    host = {r: c.host(r) for r in m.matrix_ranks}
    total = sum(map(sum, m.send_matrix))
    cross = sum(v for i, row in enumerate(m.send_matrix) for j, v in enumerate(row)
                if host[m.matrix_ranks[i]] != host[m.matrix_ranks[j]])
    if not total or not cross:
        return []
    share = cross / total
    a2a = sum(r.a2a_ms for r in m.ranks) / len(m.ranks)
    gain = a2a * share * (1 - 1 / INTRA_OVER_INTER)
    ev = (f"{m.cross_node_groups} EP group(s) span hosts; {fmt(share, 'pct')} of the token copies cross nodes; "
          f"all-to-all {fmt(a2a, 'ms')} per step")
    if c.dev == "CPU" and host_backends(r.backend for r in c.ranks):  # no NVLink: the ratio behind the gain
        action = ("keep each EP group inside a node (ep ≤ ranks per node; the rest as data parallel), or limit each "
                  "token to a few nodes (node-limited routing)")
        return [c.finding("moe_cross_node", "low", "Expert parallelism across nodes", ev, m.matrix_ranks,
                          steps_where(c.ranks), action, "not quantified: the estimate assumes GPUs' NVLink inside a "
                          "node, and these are CPU traces", None, "moe.cross_node_groups")]
    action = ("keep each EP group inside a node (ep ≤ GPUs per node; the rest as data parallel), or limit each "
              "token to a few nodes (DeepSeek-V3's node-limited routing, DeepEP's NVLink forwarding)")
    how = (f"the cross-node share of the all-to-all at NVLink speed (assumed {INTRA_OVER_INTER:g}× the NIC "
           "bandwidth per GPU)")
    return [c.finding("moe_cross_node", severity_for(gain, c.step_ms), "Expert parallelism across nodes", ev,
                      m.matrix_ranks, steps_where(c.ranks), action, c.gain_text(gain, how), gain,
                      "moe.cross_node_groups")]
