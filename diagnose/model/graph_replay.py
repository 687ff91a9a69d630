"""The device's idle inside CUDA/HIP graph replays of one rank (metrics/rank/graph_replay.py). A replay's recorded
nodes are the device ops sharing its `cudaGraphLaunch`'s correlation id; the replay runs from when it could start
(its launch call began and its stream's previous op ended) to its last recorded node's end. What a replay waits on
between its nodes (event-wait and host-function nodes, nodes the profiler did not record) leaves no event, so the
idle inside it is reported with its cause unknown. Every time is a mean per step (ms) over the rank's analysis
windows; rules/graph_replay.py reads it. A rank whose replays hold less than RECORD_IDLE_MS of such idle per step
has no record (None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass  # its __init__ compiled once per user (model/code_cache.py)


@dataclass
class GraphReplays:
    launches: float = 0.0  # graph launch calls per step with at least one recorded node
    nodes: float = 0.0  # their recorded device ops per step
    node_ms: float = 0.0  # the device time of those nodes per step
    span_ms: float = 0.0  # per step, the union of the replays' spans (ready to last node's end)
    idle_ms: float = 0.0  # per step, device idle (no op of any stream) inside those spans, in stretches ≥ 1 ms
    before_first_ms: float = 0.0  # of idle_ms, the part before a replay's first recorded node
    stretches: float = 0.0  # such idle stretches per step
    longest_ms: float = 0.0  # the longest one
    longest_step: int = 0  # the step holding it
    longest_before_first: bool = False  # it lies before its replay's first recorded node
    longest_launch_lead_ms: float = 0.0  # that replay's launch call's start to its first recorded node's start
    longest_op: str = ""  # the host op the launch was made under (innermost named op, e.g. `CompiledFunctionBackward`)
    longest_stream: int = -1  # the stream of that replay's first recorded node
    longest_nodes: int = 0  # that replay's recorded nodes
    longest_node_ms: float = 0.0  # their device time
    longest_span_ms: float = 0.0  # that replay's span
    launch_call: str = ""  # the launch call's name (`cudaGraphLaunch`, `hipGraphLaunch`)
    # a host call spanning the longest stretch (a synchronize, or a copy that held the host), if any: the host
    # waited for the device there, not the other way round (the replay's work was queued)
    held_call: str = ""  # its name
    held_op: str = ""  # the outermost host op around it on its thread (`aten::to`)
    held_region: str = ""  # the outermost user annotation around it, ProfilerStep aside (`## sparse_data_dist ##`)
    held_ms: float = 0.0  # its length
