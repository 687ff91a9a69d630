"""Recommendation rules: measured numbers in, findings with evidence and a computed gain out.

Each rule is one function of the analysis' facts (`Ctx`), listed once in `RULES`; it runs the same on a
fresh analysis as on a summary read back from disk (`Analysis.from_dict`). docs/recommendations.md
describes every rule: trigger, evidence, action and how the gain is computed.
"""

from __future__ import annotations

from llmdiag.diagnose.model.analysis import Analysis, Finding
from llmdiag.diagnose.rules.base import Ctx
from llmdiag.diagnose.rules.codecs import comm_codec
from llmdiag.diagnose.rules.comm import dp_overlap, exposed_comm, low_busbw, tp_exposed
from llmdiag.diagnose.rules.stragglers import stragglers
from llmdiag.diagnose.rules.comm_latency import comm_latency_bound
from llmdiag.diagnose.rules.host import (allocator_churn, contaminated_timings, dataloader, exposed_memcpy,
                                 host_bound, host_sync)
from llmdiag.diagnose.rules.precision import fp32_gemm
from llmdiag.diagnose.rules.fusion import norm_fusion, unfused_elementwise
from llmdiag.diagnose.rules.profiler import profiler_overhead
from llmdiag.diagnose.rules.memory import memory_near_capacity, memory_unused
from llmdiag.diagnose.rules.moe import moe_cross_node, moe_exposed_a2a, moe_imbalance
from llmdiag.diagnose.rules.accum import accum_fsdp_regather
from llmdiag.diagnose.rules.pipeline import pipeline_bubble, pipeline_imbalance
from llmdiag.diagnose.rules.idle_calls import event_wait, host_op_stall
from llmdiag.diagnose.rules.overlaps import rank_overlaps
from llmdiag.diagnose.rules.planted import name_planted
from llmdiag.diagnose.rules.chores import broadcast_buffers, embedding_imbalance, pageable_copy, zero_grad
from llmdiag.diagnose.rules.optimizer import optimizer_step
from llmdiag.diagnose.rules.capture import forward_only, sampled_capture, slow_host_ops
from llmdiag.diagnose.rules.ddp_copies import ddp_grad_copy
from llmdiag.diagnose.rules.graph_replay import graph_replay_idle
from llmdiag.diagnose.rules.held_reads import held_read

RULES = [  # (id, function): the one table of rules; docs/recommendations.md documents each
    ("pipeline_bubble", pipeline_bubble), ("pipeline_imbalance", pipeline_imbalance), ("dp_overlap", dp_overlap),
    ("tp_exposed", tp_exposed), ("memory_near_capacity", memory_near_capacity), ("memory_unused", memory_unused),
    ("host_bound", host_bound), ("stragglers", stragglers), ("low_busbw", low_busbw), ("dataloader", dataloader),
    ("fp32_gemm", fp32_gemm), ("contaminated_timings", contaminated_timings),
    ("exposed_comm", exposed_comm), ("comm_latency_bound", comm_latency_bound), ("allocator_churn", allocator_churn), ("host_sync", host_sync),
    ("event_wait", event_wait),
    ("exposed_memcpy", exposed_memcpy),
    ("moe_imbalance", moe_imbalance), ("moe_exposed_a2a", moe_exposed_a2a), ("moe_cross_node", moe_cross_node),
    ("accum_fsdp_regather", accum_fsdp_regather),
    ("host_op_stall", host_op_stall),
    ("unfused_elementwise", unfused_elementwise), ("norm_fusion", norm_fusion), ("profiler_overhead", profiler_overhead),
    ("comm_codec", comm_codec),
    ("zero_grad", zero_grad), ("pageable_copy", pageable_copy), ("broadcast_buffers", broadcast_buffers),
    ("embedding_imbalance", embedding_imbalance), ("optimizer_step", optimizer_step), ("slow_host_ops", slow_host_ops), ("sampled_capture", sampled_capture), ("forward_only", forward_only),
    ("ddp_grad_copy", ddp_grad_copy),
    ("outlier_steps", __import__("llmdiag.diagnose.rules.outlier_steps", fromlist=["x"]).outlier_steps),
    ("graph_replay_idle", graph_replay_idle), ("held_read", held_read),
    ("activation_recompute", __import__("llmdiag.diagnose.rules.recompute", fromlist=["x"]).activation_recompute),
    ("data_movement", __import__("llmdiag.diagnose.rules.data_movement", fromlist=["x"]).data_movement),
    ("cold_capture", __import__("llmdiag.diagnose.rules.cold_capture", fromlist=["x"]).cold_capture),
]


def findings(a: Analysis) -> list[Finding]:
    """All findings of all rules in the one order every output shows: the caveats first (CAVEATS), then
    `Finding.order_key` (severity, then expected gain); findings that claim the same piece of time are ranked (diagnose/rules/overlaps.py), and a slowdown
    planted with `--inject-slow` is named as such (diagnose/rules/planted.py)."""
    c = Ctx(a)
    out: list[Finding] = []
    for _, rule in RULES:
        out += rule(c)
    ranked = sorted(name_planted(a, rank_overlaps(a, out)), key=Finding.order_key)
    # the caveats that qualify every other finding (the timings, what the capture recorded) are read first (issue 36)
    return [f for f in ranked if f.id in CAVEATS] + [f for f in ranked if f.id not in CAVEATS]


CAVEATS = ("contaminated_timings", "sampled_capture", "slow_host_ops", "forward_only")
