"""The per-rank views HTA and TraceLens users reach for (issue 28 item 8): which host op launched which
kernels, GEMM/attention throughput against the device's roofline, and kernel launch statistics.

Computed once per rank in the worker (diagnose.metrics.op_kernels, roofline, launch_stats); each list is
bounded (top rows, the rest summed into one "other" row) so a 16,384-rank summary stays small.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class OpKernels:
    """The device events one host op (by name) launched, summed over the analysed steps."""

    op: str  # innermost host op enclosing the launch call ("(other ops)" for the rows past the top)
    kernels: list[str]  # the kernel name with the most time (cut to 96 characters; a list, for more later)
    distinct: int  # distinct kernel names it launched
    count: int  # device events launched
    total_ms: float  # their summed duration
    mean_us: float
    launch_delay_us: float | None  # mean of kernel start − launch call start (None: no launch call seen)


@dataclass
class RooflineRow:
    """GEMMs or attention ops of one name, shape and input type, against the device's roofline."""

    op: str  # aten::mm, aten::_scaled_dot_product_flash_attention, ... ("(other)" past the top)
    shape: str  # the op's Input Dims as text (cut to 120 characters)
    dtype: str  # precision of its first input (bf16, fp16, fp32, fp8, ...; "" unknown)
    count: int  # op calls that launched kernels
    kernel_ms: float  # summed duration of the kernels they launched
    gflop: float  # summed FLOPs (10^9): GEMM 2·M·N·K, attention 4·B·H·Sq·Sk·D (×2.5 backward)
    gbytes: float  # summed bytes of inputs and output (10^9): a lower bound on memory traffic
    tflops: float | None  # achieved: FLOPs / kernel time
    gbps: float | None  # achieved: bytes / kernel time
    intensity: float | None  # FLOPs per byte
    peak_tflops: float | None  # the device's dense peak for this dtype, None unknown
    peak_frac: float | None  # tflops / peak_tflops
    bound: str  # "compute" (intensity above the device's ridge point), "memory", or "" (device or dtype unknown)


@dataclass
class QueueStat:
    """Launched-but-not-started device events on one stream, sampled at each launch and each start (HTA's
    queue_length_summary)."""

    stream: int
    max: int
    mean: float
    samples: int


@dataclass
class LaunchStats:
    """How the host launched device work, over the analysed steps."""

    launches: int  # runtime calls matched to a device event by correlation id
    launches_per_step: float
    delay_median_us: float | None  # start-to-start delay: device event start − launch call start, analysed steps
    delay_p90_us: float | None
    delay_max_us: float | None
    launch_ms_per_step: float  # CPU time inside those launch calls, per step
    # (short kernels, under 10 µs: Hints.short_kernel_frac, computed once there)
    queue: list[QueueStat] = field(default_factory=list)  # longest queues first (at most 2 streams)
    # HTA's launch delay (cuda_kernel_launch_stats): device event start − launch call END, clipped at 0, whole
    # trace, the events HTA pairs (metrics/rank/launch_stats.hta_launch_delays); None where HTA pairs none
    hta_delay_median_us: float | None = None
    hta_delay_p90_us: float | None = None
    hta_delay_max_us: float | None = None
    hta_events: int = 0  # device events HTA's definition pairs with a launch call
    # host time inside the launch calls of kernels only (not copies or memsets: a synchronous cudaMemcpy holds the
    # host for the whole copy, which is not launch overhead), per step: what fusion and CUDA graphs remove
    kernel_launch_ms_per_step: float | None = None

    @property
    def queue_max(self) -> int:
        return max((q.max for q in self.queue), default=0)


@dataclass
class OpRow:
    """One host op name over all ranks: its per-rank OpKernels rows summed (Analysis.kernel_views.ops)."""

    op: str
    ranks: int  # ranks whose rows name it
    count: int  # device events, all ranks and steps
    total_ms: float  # their summed duration, all ranks and steps
    ms_per_step: float  # Σ over ranks of the rank's total / its steps
    mean_us: float
    launch_delay_us: float | None  # mean over the events with a launch call
    kernel: str  # the kernel name with the most time among the ranks' top kernels of this op
    max_rank: int  # the rank with the most time per step in this op
    max_rank_ms: float  # its time per step


@dataclass
class RoofRow:
    """GEMM / attention calls of one (op, shape, dtype) over all ranks (Analysis.kernel_views.roofline)."""

    op: str
    shape: str
    dtype: str
    ranks: int
    calls: int
    kernel_ms: float
    gflop: float
    gbytes: float
    tflops: float | None  # Σ FLOPs / Σ kernel time
    gbps: float | None
    intensity: float | None
    peak_tflops: float | None  # where every rank's device has the same listed peak
    peak_frac: float | None
    bound: str  # compute, memory, "" unknown, "mixed" where ranks' devices disagree


@dataclass
class StreamIdle:
    """Idle of one device stream id over the ranks that use it (HTA's per-stream idle time), ms per step."""

    stream: int
    ranks: int
    idle_ms: float  # mean over those ranks of the stream's idle per step (gaps between its events in a step)
    host_wait_ms: float  # of which the next event was not launched yet
    other_ms: float  # of which it was launched and waited on a dependency
    max_rank: int  # the rank where this stream idles most
    max_rank_ms: float


@dataclass
class KernelSeq:
    """A run of kernels one top-level host op launched back to back on one stream (one rank, the analysed steps)."""

    op: str  # the outermost host op (cpu_op) enclosing the launches
    kernels: list[str]  # kernel names in launch order, as the trace wrote them (demangled only for display)
    count: int  # occurrences
    total_ms: float  # summed duration of the kernels of every occurrence


@dataclass
class RankSequences:
    """One rank's frequent kernel sequences and the compute-kernel time their share divides by."""

    rows: list[KernelSeq] = field(default_factory=list)
    kernel_ms: float = 0.0  # compute kernels on device streams in the analysed steps
    steps: int = 0


@dataclass
class SeqRow:
    """One (op, kernel sequence) over all ranks (Analysis.kernel_views.sequences)."""

    op: str
    kernels: list[str]
    ranks: int  # ranks whose top sequences hold it
    count: int  # occurrences, all ranks and steps
    count_per_step: float  # occurrences per step, mean over those ranks
    total_ms: float  # summed kernel time of its occurrences, all ranks and steps
    ms_per_step: float  # Σ over ranks of the rank's total / its steps
    mean_us: float  # one occurrence's kernel time
    share: float  # total_ms / the compute-kernel time of every rank with sequences counted


@dataclass
class KernelViews:
    """The op → kernel and roofline views over the job: each rank's rows (computed in its worker, kept out of
    the per-rank summary so it does not grow with them) summed by op / (op, shape, dtype), the top rows kept."""

    ops: list[OpRow] = field(default_factory=list)
    roofline: list[RoofRow] = field(default_factory=list)
    ops_total: int = 0  # distinct op rows before the cut
    roofline_total: int = 0
    devices_without_peak: list[str] = field(default_factory=list)  # device names with no listed peak (no class)
    streams: list[StreamIdle] = field(default_factory=list)  # idle per stream id, most idle first (at most 16)
    sequences: list[SeqRow] = field(default_factory=list)  # frequent kernel sequences (metrics/rank/kernel_sequences.py)
