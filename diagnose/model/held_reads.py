"""Small device-to-host reads that held the host while queued device work drained (metrics/rank/held_reads.py).

A `.item()` / `.tolist()` / `.to("cpu")` of a few values issues a copy call that returns only once its copy ran,
and the copy runs only after the work queued ahead of it on its stream: the host waits for that work (a
dependency), not for the copy, which takes µs. Every time is per step (ms) over the rank's analysis windows, for
the call site holding the most; rules/held_reads.py reads it. No record below RECORD_MS per step."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HeldSite:
    """Another call site's reads (the record's own site aside), for naming them beside it."""
    call: str = ""
    stack: list[str] = field(default_factory=list)  # the annotations around it, innermost first
    held_ms: float = 0.0  # per step
    refill_ms: float = 0.0  # per step, as HeldReads.refill_ms
    to_device: bool = False  # a pageable host-to-device copy held in the synchronize after it


@dataclass
class HeldReads:
    call: str = ""  # the host call (`cudaMemcpyAsync`, `cudaMemcpy`)
    copy: str = ""  # its device copy's name (`Memcpy DtoH (Device -> Pageable)`)
    stack: list[str] = field(default_factory=list)  # host ops and annotations around the call, innermost first
    calls: float = 0.0  # such reads at this site per step
    held_ms: float = 0.0  # per step, call start to its copy's start: the host waiting for queued work
    copy_us: float = 0.0  # the copies' own device time, median (µs)
    copy_bytes: int | None = None  # their size (the copy's `bytes` arg), median; None where the trace has none
    busy_ms: float = 0.0  # per step, recorded device activity (any stream) while the host was held
    comm_ms: float = 0.0  # ... of it, communication kernels running (a collective the drained queue waited in)
    queued: int = 0  # most device ops launched before a read began and started after it (the queue it drained)
    starved_ms: float = 0.0  # per step, device idle after the copy until its next op, launched after the read
    host_rest_ms: float = 0.0  # per step, the step's host span less the holds (the host's own time, waits aside)
    steps: int = 0  # windows with such a read
    longest_ms: float = 0.0  # the site's longest single hold
    longest_step: int = -1  # the step holding it
    all_sites_ms: float = 0.0  # per step, all such reads of the rank (every site)
    # per step, device idle (any stream) from each read's copy end to the start of the first op launched after its
    # holding call returned, at most its hold: the queue the hold drained, refilled only once the host resumed
    refill_ms: float = 0.0
    all_refill_ms: float = 0.0  # ... every site's reads
    to_device: bool = False  # the site's copies go host-to-device from pageable memory (an index tensor), a
    # synchronize after them holding the host: not a read the host needs, so pinning it removes the hold
    others: list[HeldSite] = field(default_factory=list)  # the next sites by hold (up to 2)
