"""The typed analysis: what the metrics compute, what every output reads, what the JSON summary holds.

Times are milliseconds, sizes bytes, ratios in [0, 1] or None where undefined (no communication means
no overlap ratio, never NaN). Rules, the terminal, the HTML report, `check` and `diff` all read one
`Analysis`; JSON exists only at the edge (`llmdiag.diagnose.model.summary`: `to_dict` / `from_dict`).
Schema 2 (this one) nests each finding's evidence (`Evidence`); schema 1 summaries are read as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.errors import LlmdiagError
from llmdiag.diagnose.model.codec import Invalid, build, lazy_types, to_json_dict
from llmdiag.diagnose.model.idle import CommCodec, HostStall, IdleBreakdown, TrainingEvidence
from llmdiag.diagnose.model.chores import RankChores
from llmdiag.diagnose.model.held_reads import HeldReads
from llmdiag.diagnose.model.phase_cover import PhaseCover
from llmdiag.diagnose.model.optimizer import OptimizerStep
from llmdiag.diagnose.model.ddp_copies import DdpCopies
from llmdiag.diagnose.model.recompute import Recompute
from llmdiag.diagnose.model.data_movement import DataMovement
from llmdiag.diagnose.model.norm_fusion import NormFusion
from llmdiag.diagnose.model.graph_replay import GraphReplays
from llmdiag.diagnose.model.outlier_steps import CollectiveRepeat, OutlierStepOps
from llmdiag.diagnose.model.critical_path import CriticalPath, JobCriticalPath, RankCriticalPath
from llmdiag.diagnose.model.kernel_views import KernelViews, LaunchStats
from llmdiag.diagnose.model.provenance import Provenance
from llmdiag.diagnose.model.steps import StepSummary
from llmdiag.diagnose.model.pack import PACKED_SCHEMA, UNPACKED_SCHEMA, unpack, upgrade_v1

if TYPE_CHECKING:
    from llmdiag.diagnose.model.manifest import Manifest
    from llmdiag.diagnose.model.matching import CaptureWindow, LateArrival, P2PMatch  # noqa: F401 (re-export)
    from llmdiag.diagnose.model.moe import AccumSummary, MoeSummary
    from llmdiag.diagnose.model.pipeline import PipelinePrediction, PipelineResult, StageBubble  # noqa: F401 (re-export)
    from llmdiag.diagnose.model.runs import RunInfo
    from llmdiag.diagnose.model.skew import CollectiveSkew, SkewResult, Straggler  # noqa: F401 (re-export)
    from llmdiag.diagnose.model.whatif import WhatIf

# Types of the parts a one-rank trace does not have (manifest, MoE, matching, skew, runs, what-if, pipeline): imported on
# first use, not with the model (codec.lazy_types); codec.type_hints loads those a class's hints name.
LAZY_TYPES = {"Manifest": "manifest", "CaptureWindow": "matching", "LateArrival": "matching", "P2PMatch": "matching",
              "AccumSummary": "moe", "MoeSummary": "moe", "PipelinePrediction": "pipeline",
              "PipelineResult": "pipeline", "StageBubble": "pipeline", "RunInfo": "runs", "WhatIf": "whatif",
              "CollectiveSkew": "skew", "SkewResult": "skew", "Straggler": "skew"}
__getattr__ = lazy_types(__name__, LAZY_TYPES)
SCHEMA_VERSION = UNPACKED_SCHEMA


@dataclass
class StepBreakdown:
    """One analysis window (a ProfilerStep) on one rank. The five parts sum to time_ms."""

    step: int
    start_ms: float  # relative to the rank's trace origin
    time_ms: float
    compute_ms: float  # |U(compute)|
    comm_ms: float  # |U(comm)|
    overlapped_comm_ms: float  # |U(comm) ∩ U(compute)|
    exposed_comm_ms: float  # |U(comm) − U(compute)|
    compute_only_ms: float  # |U(compute) − U(comm)|
    other_ms: float  # memcpy/memset time not under compute or comm
    idle_ms: float  # nothing running
    overlap_ratio: float | None
    critical_path: CriticalPath | None = None  # what bounds the step (GPU traces; metrics/rank/critical_path)


@dataclass
class CommGroupStats:
    """Communication of one collective kind in one process group, on one rank."""

    kind: str  # allreduce, allgather, reducescatter, alltoall, broadcast, sendrecv, send, recv, ...
    pg: str  # process group name/description, "" when the trace does not say
    count: int
    total_ms: float  # sum of durations (not a union: per-op view)
    overlapped_ms: float  # sum over ops of |op ∩ U(compute)|
    overlap_ratio: float | None  # overlapped_ms / total_ms (duration-weighted, Nsight's view)
    bytes: int  # sum of message sizes where known, else 0
    sized_count: int  # ops whose size is known
    algbw_gbps: float | None  # bytes / time over the sized ops
    busbw_gbps: float | None  # algbw × nccl-tests factor for the kind and group size
    group_size: int | None


@dataclass
class KernelStat:
    """One kernel (or top-level op) name on one rank: its calls, time and share of all kernel time in the windows."""

    name: str
    kind: str  # compute, comm, memcpy, memset
    count: int
    total_ms: float
    mean_us: float
    max_us: float
    share: float  # of the summed time of all kernels (or top-level ops) in the windows


@dataclass
class MemoryStat:
    """One device's memory on one rank: allocated and reserved peaks, when and under which op, and the timeline."""

    device: str  # "cuda:0", "cpu"
    peak_allocated: int
    peak_reserved: int | None  # None where nothing is reserved or recorded (CPU, the 2021 schema)
    peak_ms: float  # time of the allocated peak, relative to the trace origin
    peak_op: str  # innermost op running at the peak, "" if none
    capacity: int | None  # device memory, where known
    timeline: list[list[float]]  # [[ms, allocated, reserved], ...] downsampled, peaks kept

    @property
    def used(self) -> int:
        """Bytes the device holds for the process: reserved, or allocated where nothing records a reserve."""
        return max(self.peak_reserved or 0, self.peak_allocated)

    @property
    def used_frac(self) -> float | None:
        return self.used / self.capacity if self.capacity else None


@dataclass
class Hints:
    """Facts the recommendation rules use that no headline metric carries."""

    kernels_per_step: float
    median_kernel_us: float | None
    short_kernel_frac: float | None  # share of kernels under 10 µs
    device_idle_frac: float | None  # GPU idle share of step time (GPU traces)
    dataloader_frac: float | None  # host time in DataLoader __next__ per step time
    fp32_gemm_frac: float | None  # share of compute kernel time in GEMMs and convolutions evidenced to run in fp32;
    # None when no GEMM's precision is evidenced (host op Input type or a name that states it: metrics/rank/precision.py)
    compute_capability: float | None  # e.g. 8.0, for tensor-core questions
    gemm_ms_by_precision: dict[str, float] = field(default_factory=dict)  # GEMM (and convolution) ms per step by input precision
    # (fp32, tf32, bf16, fp16, fp8, mxfp4, ..., "unknown")
    # Profiler options the trace shows (metrics/rank/profiler_options.py): None where not measured
    python_events_per_step: float | None = None  # `python_function` events (with_stack=True)
    host_ops_per_step: float | None = None  # cpu_op events
    memory_events_per_step: float | None = None  # `[memory]` instants (profile_memory=True)
    shapes_recorded: bool | None = None  # ops carry Input Dims / Input type (record_shapes=True); None: no evidence
    # Unfused elementwise/reduction kernels (metrics/rank/elementwise.py): None on CPU traces or without kernels
    elementwise_frac: float | None = None  # share of compute kernel time
    elementwise_per_step: float | None = None  # kernels per step
    elementwise_median_us: float | None = None
    elementwise_ms_by_pattern: dict[str, float] = field(default_factory=dict)  # ms per step by launching-op pattern
    elementwise_fusable_ms: float | None = None  # per step: the patterns' time beyond one pass of their data
    fp32_on_path_frac: float | None = None  # share of fp32 GEMM time the device's next work waited for (its
    # successor launched before it ended): a faster kernel shortens the step only there (metrics/rank/precision.py)
    host_wait_ms: float | None = None  # per step, host time in device-wait calls (synchronize, synchronous copies):
    # where the device idles, the most a faster device can take off the step (metrics/rank/host_wait.py)
    conv_ms_by_precision: dict[str, float] = field(default_factory=dict)  # the convolutions' part of
    # gemm_ms_by_precision, ms per step (cuDNN scudnn/dgrad/wgrad kernels: metrics/rank/conv_names.py)
    layout_transform_ms: float | None = None  # per step, cuDNN NCHW <-> NHWC transform kernels (nchwToNhwcKernel)


@dataclass
class PipelineAction:
    """One pipeline action of a rank on the analysis' aligned clock: stage, kind, microbatch, span (the timeline's)."""

    stage: int
    kind: str  # F, B, I, W
    microbatch: int
    start_ms: float  # absolute (clock-aligned) time relative to the analysis' global origin
    end_ms: float


@dataclass
class RankMetrics:
    """One rank's metrics: the step breakdown per window and on average, communication, kernels, memory, hints."""

    rank: int
    file: str
    host: str
    trace_kind: str  # "gpu" or "cpu"
    steps: list[StepBreakdown]
    step_time_ms: float  # mean over steps
    compute_ms: float  # per-step means of the breakdown parts
    comm_ms: float
    overlapped_comm_ms: float
    exposed_comm_ms: float
    compute_only_ms: float
    other_ms: float
    idle_ms: float
    overlap_ratio: float | None  # Σ overlapped / Σ comm over the steps
    exposed_comm_frac: float  # exposed comm / step time
    idle_frac: float
    comm_by_kind: list[CommGroupStats]
    top_kernels: list[KernelStat]
    memory: list[MemoryStat]
    hints: Hints
    pipeline_actions: list[PipelineAction] = field(default_factory=list)
    coords: dict = field(default_factory=dict)  # mesh coordinates from the manifest (free-form in foreign summaries)
    origin_us: float = 0.0  # the trace clock at time 0 of this rank's relative times
    warnings: list[str] = field(default_factory=list)
    kernel_time_ms: float | None = None  # summed time of all kernels (or top-level ops) in the windows, all steps
    idle: IdleBreakdown | None = None  # device idle split by what the host did meanwhile (GPU traces)
    training: TrainingEvidence | None = None  # backward / optimizer ops seen: training advice needs both
    device: str = ""  # deviceProperties[0].name of the trace ("" unknown): link peaks for foreign traces
    clock_shift_ns: int = 0  # added to this rank's relative times to put them on the analysis' one aligned clock
    # (its origin against the earliest rank's, plus its host's skew shift): computed once (metrics/job/clock.py)
    launch: LaunchStats | None = None  # launch delay, launch overhead, queue length (GPU traces)
    steps_total: int | None = None  # steps analysed where `steps` holds only some (model/step_cap.py); None: all
    steps_source: str = "ProfilerStep"  # where the steps come from: "ProfilerStep", "Optimizer.step" (between
    # consecutive optimizer steps, no ProfilerStep in the trace), "repeated_pattern" / "forward_backward" (read from
    # the host ops, metrics/rank/iterations.py) or "capture" (one window; metrics/rank/steps.py)
    comm_host_stall: HostStall | None = None  # host-thread stalls in/before collective ops (metrics/rank/comm_host_stall.py)
    comm_codec: CommCodec | None = None  # quantized-comm codec kernels per step (metrics/rank/comm_codec.py)
    backend: str = ""  # distributedInfo.backend of the trace ("nccl", "gloo"; "" unknown): a CPU-only trace of an
    # nccl job recorded no GPU activity, it is not a gloo run (devices.cpu_only_words)
    critical_path: RankCriticalPath | None = None  # over the rank's steps: length the mean per step (GPU traces)
    critical_path_note: str = ""  # why a GPU rank's critical_path (and its steps') is null: event-sampled capture
    chores: RankChores | None = None  # per-step chores and what the capture is (metrics/rank/chores.py; GPU traces)
    optimizer: OptimizerStep | None = None  # the optimizer step's span and device idle (metrics/rank/optimizer_step.py)
    ddp_copies: DdpCopies | None = None  # DDP's copies of gradients into/out of buckets (metrics/rank/ddp_copies.py)
    data_movement: DataMovement | None = None  # data-movement kernels per family (metrics/rank/data_movement.py)
    norm_fusion: NormFusion | None = None  # normalization kernels and their chained pointwise ones (metrics/rank/norm_fusion.py)
    graph_replays: GraphReplays | None = None  # device idle inside CUDA-graph replays (metrics/rank/graph_replay.py)
    held_reads: HeldReads | None = None  # small device-to-host reads that held the host (metrics/rank/held_reads.py)
    recompute: Recompute | None = None  # activation checkpointing's recomputed forward (metrics/rank/recompute.py)
    phase_cover: list[PhaseCover] = field(default_factory=list)  # event-sampled ranks only: how much of each host
    # phase the sample recorded (metrics/rank/phase_cover.py)
    outlier_ops: list[OutlierStepOps] = field(default_factory=list)  # outlier steps' grown host ops (metrics/rank/outlier_ops.py)
    outlier_collectives: list[CollectiveRepeat] = field(default_factory=list)  # (metrics/rank/collective_repeats.py)
    simulated_gain_ms: dict[str, float] = field(default_factory=dict)  # ms per step a cause's edit takes off the
    # steps, re-timed on the rank's dependency graph (metrics/rank/critical_path/simulate.py): "fp32_gemm/<speed-up>",
    # "host_sync", "comm", "comm:<process group>"; only the causes the trace shows, none on CPU traces

    @property
    def nsteps(self) -> int:
        """Steps analysed (at least 1, so per-step divisions are defined), also where `steps` was cut."""
        return max(1, self.steps_total or len(self.steps))

    @property
    def memory_peak(self) -> int | None:
        """Peak allocated bytes over this rank's devices. A GPU trace's peak is its devices' only: where all its
        `[memory]` events are CPU-side (Device Type 0) the device peak was not recorded (None), never the CPU's."""
        mem = [m for m in self.memory if m.device != "cpu"] if self.trace_kind == "gpu" else self.memory
        return max((m.peak_allocated for m in mem), default=None)


@dataclass
class Issue:
    """A per-file problem: the rank is left out (error) or analysed with a caveat (warning)."""

    file: str
    message: str
    rank: int | None = None
    severity: str = "warning"  # "warning" or "error"


@dataclass
class Aggregate:
    """The job in one row: step time, overlap, exposed comm, idle and memory over the ranks, throughput where known."""

    ranks: int
    step_time_ms: float  # mean over ranks of per-rank mean step time
    step_time_max_ms: float
    overlap_ratio_min: float | None
    overlap_ratio_mean: float | None
    overlap_worst_rank: int | None
    exposed_comm_frac_mean: float
    exposed_comm_frac_max: float
    idle_frac_mean: float
    compute_frac_mean: float
    memory_peak_max: int | None  # max over ranks/devices of peak allocated
    memory_peak_rank: int | None
    tokens_per_s: float | None
    mfu: float | None
    achieved_tflops_per_device: float | None


SEVERITIES = ("high", "medium", "low")


@dataclass
class Evidence:
    """What a finding rests on: the measured numbers in words, the summary field, where it was seen."""

    text: str
    metric: str  # summary path of the number the rule tests, e.g. "pipeline.measured"
    ranks: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    source: str = "trace"  # where the facts come from: "trace", "manifest", or "assumed" (then the text says so)
    events: list[str] = field(default_factory=list)  # the trace events (or manifest keys) the rule read


@dataclass
class Finding:
    """One recommendation: the rule that fired, its evidence, the action, the expected gain and how it was computed."""

    id: str  # the rule's id (docs/recommendations.md)
    severity: str  # one of SEVERITIES
    title: str
    evidence: Evidence
    action: str
    expected_gain: str  # the gain in words, with how it was computed
    gain_ms: float | None  # per step; None where the finding is not a speed-up
    gain_frac: float | None = None  # gain_ms / the analysis' mean step time: the one share every output prints
    gain_kind: str = "estimate"  # "estimate" (a model of the change) or "bound" (at most the measured part; "up to")
    claims: str = ""  # the piece of time the gain comes from, e.g. "exposed_comm" (diagnose/rules/overlaps.py)
    part_of: str | None = None  # id of the finding that keeps this time's gain: this one's is not counted again
    shared_ms: float = 0.0  # of gain_ms, the time findings shown above already count (rules/shared_time.py)

    def order_key(self) -> tuple:
        """The one order of findings everywhere: severity, then expected gain, then rule id."""
        return SEVERITIES.index(self.severity), -(self.gain_ms or 0.0), self.id


@dataclass
class AnalysisOptions:
    """How `analyze` was asked to read the traces."""

    comm_regex: str | None = None
    exclude_last_step: bool = False
    files: int = 0  # trace files found
    bytes: int = 0  # bytes read from the analysed ranks' files
    run_folder: bool = False  # the input was an llmdiag run folder (outputs go inside it)
    hta_compat: bool = False  # `--hta-compat`: the critical path on HTA's graph (and the last step dropped)


@dataclass
class Analysis:
    """The analysis of one job: every rank, the cross-rank results, issues and findings; what every output reads."""

    source: str
    name: str
    trace_kind: str  # gpu, cpu, or mixed
    world_size: int | None
    layout: dict[str, int] | None
    manifest: Manifest | None  # the run's manifest, as `llmdiag run` wrote it
    ranks: list[RankMetrics]
    ranks_missing: list[int]
    aggregate: Aggregate
    pipeline: PipelineResult | None
    skew: SkewResult | None
    issues: list[Issue]
    options: AnalysisOptions
    findings: list[Finding] = field(default_factory=list)  # filled by diagnose.rules, in Finding.order_key order
    schema_version: int = SCHEMA_VERSION
    llmdiag_version: str = ""
    ranks_duplicate: list[int] = field(default_factory=list)  # ranks with several trace files, one chosen
    provenance: Provenance | None = None  # how `analyze` was run (command, options, inputs, time)
    moe: MoeSummary | None = None  # expert parallelism (diagnose.metrics.moe), None without all-to-all / MoE labels
    accum: AccumSummary | None = None  # gradient accumulation microsteps (diagnose.metrics.accum)
    whatif: WhatIf | None = None  # what-if simulation (diagnose.simulate), None where no dependency graph was built
    steps: StepSummary | None = None  # every step over ranks, the median step, outlier steps (diagnose.metrics.step_stats)
    runs: list[RunInfo] = field(default_factory=list)  # the runs the input holds where more than one (diagnose.metrics.runs)
    kernel_views: KernelViews | None = None  # op → kernel and roofline over the ranks (diagnose.metrics.kernel_world)
    critical_path: JobCriticalPath | None = None  # the job's path through its collectives (metrics/job/critical_path)
    critical_path_note: str = ""  # why the job's path is null where it has several GPU ranks: some event-sampled

    def to_dict(self) -> dict:
        """The versioned summary: plain JSON types (numpy scalars become Python numbers, non-UTF-8 file names
        made valid)."""
        return to_json_dict(self)[0]

    @classmethod
    def from_dict(cls, data, where: str = "summary") -> Analysis:
        """An Analysis from a summary of schema 1, 2 or 3 (2, packed: model/pack.py); LlmdiagError naming the first field that does not fit."""
        if not isinstance(data, dict) or "ranks" not in data or "schema_version" not in data:
            raise LlmdiagError("not an llmdiag summary (no 'schema_version' and 'ranks')", where,
                               "write one with `llmdiag analyze RUN --json FILE`")
        v = data["schema_version"]
        if isinstance(v, int) and not isinstance(v, bool) and v > PACKED_SCHEMA:
            raise LlmdiagError(f"summary schema_version {v} is newer than this llmdiag reads ({PACKED_SCHEMA})",
                               where, "upgrade llmdiag, or re-record the summary")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LlmdiagError(f"summary schema_version {v!r} is not a version (1 to {PACKED_SCHEMA})", where,
                               "re-record the summary with `llmdiag analyze RUN --json FILE`")
        if v == PACKED_SCHEMA and data.get("encoding") != "columnar":
            raise LlmdiagError(f"summary schema_version {v} without its encoding ('columnar')", where,
                               "re-record the summary with `llmdiag analyze RUN --json FILE`")
        if v == PACKED_SCHEMA:
            from llmdiag.diagnose.model.pack_read import Slow, read_packed

            try:
                return read_packed(cls, data)  # column by column (16,384 ranks in seconds)
            except (Slow, TypeError):
                pass  # a shape it leaves to the general reader, which names what is wrong
        try:
            return build(cls, upgrade_v1(data) if v == 1 else unpack(data))
        except Invalid as e:
            raise LlmdiagError(f"invalid summary: {e}", where) from None

    def rank(self, rank: int) -> RankMetrics | None:
        return next((r for r in self.ranks if r.rank == rank), None)

    @property
    def step_ms(self) -> float | None:
        """The mean step time every share of "the step" divides by."""
        return self.aggregate.step_time_ms or None
