"""Expert-parallel (MoE) results: token traffic from all-to-all split sizes, imbalance, dispatch/combine time.

Filled by diagnose.metrics.moe from every rank's all-to-all(v) ops; None in an Analysis without expert
parallelism. Counts are rows (tokens x top-k copies) as the split sizes give them, per step (mean over the
analysed steps). Times are ms per step, mean over steps.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class MoeLayer:
    """One dispatch all-to-all (a MoE layer's forward) in one step, matched across its EP group."""

    step: int  # index among the analysed steps
    layer: int  # ordinal of this dispatch within the step (forward order)
    group: list[int]  # global ranks of the EP group, in split order
    received: list[int]  # rows each rank of the group received
    imbalance: float  # max / mean of received


@dataclass
class MoeRank:
    rank: int
    sent: int  # rows sent per step by this rank's dispatches
    received: int  # rows received per step
    dispatch_ms: float  # time inside dispatch (labels, or dispatch kernels) per step
    combine_ms: float
    a2a_ms: float  # all-to-all(v) communication per step (every EP op, forward and backward)
    a2a_exposed_ms: float  # of which not overlapped with compute
    expert_ms: float  # expert compute per step (llmdiag/moe/experts spans, or compute between dispatch and combine)
    step_ms: float


@dataclass
class MoeSummary:
    source: str  # "split sizes" (token counts known) or "kernels" (DeepEP-style: times only)
    role_source: str  # "labels" (llmdiag/moe/*) or "order" (every all-to-all with splits counted as dispatch)
    groups: list[list[int]]  # EP groups seen
    ranks: list[MoeRank]
    layers: list[MoeLayer] = field(default_factory=list)
    send_matrix: list[list[int]] = field(default_factory=list)  # [src][dst] rows per step, world order
    matrix_ranks: list[int] = field(default_factory=list)  # the global rank of each matrix row/column
    imbalance: float | None = None  # max / mean of rows received per rank (all dispatches)
    worst_layer_imbalance: float | None = None  # max over (layer, step)
    hot_rank: int | None = None  # the rank that receives most
    expert_imbalance: float | None = None  # max / mean of expert compute time per rank
    slow_expert_rank: int | None = None
    dispatch_combine_frac: float = 0.0  # (dispatch + combine) / step, mean over ranks
    a2a_exposed_frac: float = 0.0  # exposed all-to-all / step, mean over ranks
    cross_node_groups: int = 0  # EP groups whose ranks span more than one host

    def rank(self, rank: int) -> MoeRank | None:
        return next((r for r in self.ranks if r.rank == rank), None)


@dataclass
class AccumSummary:
    """Gradient accumulation: forward passes (microsteps) per optimizer step and DP traffic per optimizer step."""

    microsteps: int  # forward passes per step (median over ranks and steps)
    source: str  # "labels" (llmdiag/forward) or "manifest"
    dp_comm_ms_per_step: float  # data-parallel communication per optimizer step (= per profiler step), mean over ranks
    dp_ops_per_step: float  # data-parallel collectives per optimizer step
    allgather_ms_per_step: float = 0.0  # FSDP parameter gathers: these run every microstep
    reduce_ms_per_step: float = 0.0  # gradient all-reduce / reduce-scatter: once per optimizer step
    regather_ms_per_step: float = 0.0  # all-gathers launched in microsteps after the first (parameters re-gathered)
