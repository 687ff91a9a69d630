"""The MoE and gradient-accumulation figures as the terminal and the report print them: one list of labelled,
formatted values each, so the two outputs cannot disagree on a number or its unit."""

from __future__ import annotations

from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.model.moe import AccumSummary, MoeSummary

MOE_RANK_HEADER = ["rank", "sent", "received", "dispatch ms", "combine ms", "experts ms", "all-to-all ms",
                   "exposed ms", "step ms"]


def ep_groups_text(m: MoeSummary) -> str:
    """The EP groups as the MoE heading names them: "EP groups [0, 1]; [2, 3]", or that none is known (a single
    rank's trace, or all-to-alls whose group lists no ranks)."""
    groups = [g for g in m.groups if g]
    return "EP groups " + "; ".join(str(g) for g in groups) if groups else "EP groups not known from the trace"


def moe_cards(m: MoeSummary) -> list[tuple[str, str, str]]:
    """(label, value, note) of the MoE headline figures."""
    return [("imbalance (max/mean tokens)", fmt(m.imbalance, "x"),
             f"rank {m.hot_rank} receives most" if m.hot_rank is not None else "no split sizes in the trace"),
            ("worst layer", fmt(m.worst_layer_imbalance, "x"), "max over MoE layers and steps"),
            ("expert time imbalance", fmt(m.expert_imbalance, "x"),
             f"slowest: rank {m.slow_expert_rank}" if m.slow_expert_rank is not None else ""),
            ("dispatch + combine", fmt(m.dispatch_combine_frac, "pct"), "of the step, mean over ranks"),
            ("exposed all-to-all", fmt(m.a2a_exposed_frac, "pct"), "of the step, mean over ranks")]


def moe_rank_rows(m: MoeSummary) -> list[list[str]]:
    """One row per rank under MOE_RANK_HEADER: token rows per step, then ms per step."""
    return [[str(int(r.rank)), fmt(r.sent, "int"), fmt(r.received, "int"), fmt(r.dispatch_ms, "ms", False),
             fmt(r.combine_ms, "ms", False), fmt(r.expert_ms, "ms", False), fmt(r.a2a_ms, "ms", False),
             fmt(r.a2a_exposed_ms, "ms", False), fmt(r.step_ms, "ms", False)] for r in m.ranks]


def accum_cards(acc: AccumSummary) -> list[tuple[str, str, str]]:
    """(label, value, note) of gradient accumulation, per optimizer step (one profiler step holds one)."""
    src = "from llmdiag/forward labels" if acc.source == "labels" else "from the manifest's --grad-accum"
    return [("microsteps", fmt(acc.microsteps, "int"), f"forward passes per optimizer step, {src}"),
            ("DP communication", fmt(acc.dp_comm_ms_per_step, "ms"),
             f"per optimizer step, {fmt(acc.dp_ops_per_step, 'avg')} collectives, mean over ranks"),
            ("parameter all-gathers", fmt(acc.allgather_ms_per_step, "ms"), "per optimizer step: run every microstep"),
            ("gradient reductions", fmt(acc.reduce_ms_per_step, "ms"), "per optimizer step: once per optimizer step"),
            ("re-gathers", fmt(acc.regather_ms_per_step, "ms"),
             "all-gathers in microsteps after the first (FSDP resharded between microsteps)")]
