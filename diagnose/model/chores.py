"""Per-step chores of one rank that cost time without being the model's work, and what the capture itself is
(metrics/rank/chores.py): gradient zeroing that launches kernels, copies from pageable host memory, DDP's
per-forward buffer broadcast, the speed of the host's cheapest ops, event sampling, embedding-lookup kernels.
Every time is a mean per step (ms) over the rank's analysis windows; the rules in rules/chores.py and
rules/capture.py read them. A rank with none of them (and a complete capture) has no record (None)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass  # its __init__ compiled once per user (model/code_cache.py)

META_MIN_CALLS = 100  # metadata-only op calls needed to read the host's floor per op
META_SLOW_US = 10.0  # their fastest call at or above this: the host is slow on every op (recorded; else not)


@dataclass
class RankChores:
    zero_grad_ms: float = 0.0  # host time per step inside `Optimizer.zero_grad#...` ops
    zero_grad_launches: float = 0.0  # kernel/memset launch calls per step made inside them (set_to_none=False)
    zero_grad_idle_ms: float = 0.0  # device idle per step inside them
    zero_grad_op: str = ""
    pageable_copies: float = 0.0  # host<->device copies from/to pageable memory per step
    pageable_device_ms: float = 0.0  # their device time per step
    pageable_call_ms: float = 0.0  # host time per step in their runtime calls (the host blocks in them)
    pageable_idle_ms: float = 0.0  # device idle per step from each call's start to the device's next op after it
    pageable_name: str = ""  # the copies' name (`Memcpy HtoD (Pageable -> Device)`)
    buffer_bcasts: float = 0.0  # broadcast collectives per step inside `DistributedDataParallel.forward`
    buffer_elems: str = ""  # their elements and dtypes in one step ("53120 Float + 53 Long")
    buffer_host_ms: float = 0.0  # host time per step of the pack / broadcast / unpack ops around them
    buffer_idle_ms: float = 0.0  # device idle per step inside those ops
    # metadata-only ops, recorded only where their fastest call is slow (metrics/rank/chores.py META_SLOW_US)
    meta_op: str = ""  # the most called metadata-only op (aten::view, aten::as_strided, ...)
    meta_calls: int = 0  # calls of the metadata-only ops in the windows
    meta_min_us: float | None = None  # the fastest of them (µs)
    meta_median_us: float | None = None
    sampled_share: float | None = None  # host ops followed by the next External id, recorded only where below
    # metrics/rank/idle_stretch.py's SAMPLED_SHARE (an event-sampled capture); None: complete or unknown
    lookup_ms: float = 0.0  # embedding-lookup kernels' device time per step (TBE / EmbeddingBag)
    lookup_kernels: float = 0.0  # their count per step
    lookup_top: str = ""  # the longest of them by total time
    lookup_top_ms: float = 0.0  # its time per step
