"""Where a rank's device idle time goes, and whether its trace shows a training step at all.

Idle time alone says "the GPU waited"; a recommendation needs to know on what. Each step's device idle is
split by what the host was doing meanwhile (metrics/rank/idle.py), so rules can quote the op names they act on
and stay silent where the idle belongs to something no setting changes (capture edges).
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class EventWait:
    """The dependency a blocking call's idle waited on: its device op queued on `wait_stream` behind a stream-event
    wait (metrics/rank/event_waits.py); the event recorded on `record_stream` after `record_op` (-1 / "" where the
    trace shows no launch before the record)."""

    call: str  # cudaStreamWaitEvent / hipStreamWaitEvent
    wait_stream: int
    queued_op: str  # the device op that started only when the event was done
    queued_ms: float  # its launch to its start
    record_stream: int = -1
    record_op: str = ""
    record_done_before_ms: float | None = None  # how long before the queued op started that recorded work ended


@dataclass
class IdleStretch:
    """One long stretch of device idle that a single host event covers (most of it): the op to name instead of
    "launch overhead". `stack` lists the host ops enclosing it on its thread, innermost first."""

    step: int
    idle_ms: float  # the stretch's idle (ms)
    op: str  # the covering host event: a blocking runtime call (`hipMemcpyWithStream`) or a host op
    op_ms: float  # that event's own duration
    cause: str  # "runtime" (a blocking call or host sync op) or "host" (any other host op)
    stack: list[str] = field(default_factory=list)
    unrecorded_ms: float = 0.0  # a host op's longest stretch with no child op or runtime call under it (0: no child)
    event_wait: EventWait | None = None  # a blocking call whose device op waited on a stream-event wait
    later_calls_ms: float | None = None  # set where the op is the first call of its name and shapes (Input Dims) and
    # the later calls are much shorter: their median (a one-time setup, e.g. cuBLASLt's first call of a shape)
    first_use: int = 0  # first-use events starting in the stretch: the driver loading a kernel on its first launch
    # (the profiler's `Lazy Function Loading`) or a module load (`cuModuleLoad*`, `cuLibraryLoad*`)


@dataclass
class AllocStep:
    """Allocator runtime calls of one step: how many, and the device idle spent inside them."""

    step: int
    calls: int  # cudaMalloc/cudaFree/hipMalloc/hipFree/cuMemAlloc/cuMemFree calls in the step
    mallocs: int  # of which allocations
    idle_ms: float  # device idle inside them


@dataclass
class LaunchWait:
    """Device idle per step in short gaps (< 1 ms) that end with work launched after the gap began, while host ops
    run or no host event does (metrics/rank/launch_wait.py): the device waiting on the host to issue its next
    work, the idle launch overhead and eager per-op host cost can claim."""

    wait_ms: float  # that idle, mean ms per step
    in_launch_ms: float  # of it, the part inside the launch calls themselves (cudaLaunchKernel, ...)
    gaps: float  # such gaps per step
    long_ms: float = 0.0  # the same kind of idle in gaps of 1 ms or more (one host event's: not counted above)
    long_ops_ms: float = 0.0  # of long_ms, the part while host ops run (idle.py's host_bound cause)


@dataclass
class IdleBreakdown:
    """Device idle of one rank, mean ms per step, split in this order of precedence (the parts sum to idle_ms):
    capture edge, queued work, blocking runtime API, DataLoader, waiting on communication/peer, host-bound,
    unattributed."""

    idle_ms: float
    edge_ms: float = 0.0  # before the first / after the last device event of the window (capture edges)
    queued_ms: float = 0.0  # the next kernel was already launched: waiting on a dependency, not on the host
    runtime_ms: float = 0.0  # malloc/free, synchronize, .item() and other blocking copies
    dataloader_ms: float = 0.0  # host inside DataLoader __next__
    comm_wait_ms: float = 0.0  # host blocked in a communication wait or a pipeline peer's recv
    host_bound_ms: float = 0.0  # other host ops running, no kernel in flight
    unattributed_ms: float = 0.0  # no host op seen at all
    runtime_ops: dict[str, float] = field(default_factory=dict)  # op name -> idle ms per step it covers
    runtime_calls: dict[str, float] = field(default_factory=dict)  # op name -> calls per step
    stretches: list[IdleStretch] = field(default_factory=list)  # the longest single-op idle stretches
    alloc_steps: list[AllocStep] = field(default_factory=list)  # per step, where any allocator call ran
    python_events: int = 0  # python_function events (with_stack=True): the profiler's stack recording inflates host time
    op_ids_contiguous: float | None = None  # recorded host ops whose next one (External id) is recorded too: far
    # below 1 in an event-sampled trace (hta/sampled_pair: 0.62; complete captures 0.98-1.0)
    launch_wait: LaunchWait | None = None  # the idle the device spends waiting for the host's next launch


@dataclass
class HostStall:
    """Host-thread stalls inside and just before the ops that launch collectives (metrics/rank/comm_host_stall.py):
    what delays a straggler's arrival when its device idle shows nothing."""

    ms_per_step: float  # stalls (each ≥ 1 ms: inside an op with no child event, or before it with no event)
    op: str = ""  # the collective op holding the most
    thread: str = ""  # its thread (the autograd engine's for the backward's collectives)
    op_ms_per_step: float = 0.0  # of ms_per_step, that op's on that thread
    next_op: str = ""  # the op (or user annotation just before one) holding the next most, on any thread
    next_thread: str = ""
    next_ms_per_step: float = 0.0


@dataclass
class CommCodec:
    """A quantized-communication codec (metrics/rank/comm_codec.py), per step: device time of the kernels its
    encode and decode ranges launch (forward), of its gradient nodes' (backward), and of the collectives it encodes."""

    precision: str = ""  # the wire precision(s) the ranges name ("fp16")
    encode_ms_per_step: float = 0.0
    decode_ms_per_step: float = 0.0
    calls_per_step: float = 0.0  # encoder + decoder ranges per step
    backward_ms_per_step: float = 0.0  # the codec ops' gradient nodes next to the exchange's backward
    wire_ms_per_step: float = 0.0  # the encoded collectives' kernels, forward and backward (waits included)
    wire_bytes_bound_ms_per_step: float = 0.0  # of it, what can scale with bytes (an exchange and its backward: the shorter)
    wire_count_per_step: float = 0.0  # encoded collective kernels per step
    host_ms_per_step: float = 0.0  # host time of the codec ranges and its gradient nodes


@dataclass
class TrainingEvidence:
    """What the trace shows of training (counts per step): autograd backward and optimizer ops, and the data-parallel
    wrapper (DDP or FSDP) that DDP/FSDP advice needs identified."""

    backward_ops: float = 0.0
    optimizer_ops: float = 0.0
    ddp_ops: float = 0.0  # DistributedDataParallel.forward / DDP reducer ops: DDP identified from the trace
    fsdp_ops: float = 0.0  # FSDP / FullyShardedDataParallel / fully_shard ops

    @property
    def training(self) -> bool:
        return self.backward_ops > 0 and self.optimizer_ops > 0
