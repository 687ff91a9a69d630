"""Collectives and send/recv matched across ranks, as the summary holds them: arrival skew per collective, the
stragglers, late ranks (diagnose.metrics.job.skew computes them). Apart from analysis.py, which imports this on
first use: a one-rank trace has nothing to match and does not build these types (issue #30)."""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field
from llmdiag.diagnose.model.matching import CaptureWindow, LateArrival, P2PMatch


@dataclass
class CollectiveSkew:
    """Arrival skew of one collective kind in one group, over the collectives matched across ranks."""

    pg: str
    kind: str
    matched: int  # collectives seen on ≥ 2 ranks
    mean_skew_ms: float  # arrival skew: latest start − earliest start
    max_skew_ms: float
    mean_transfer_ms: float  # shortest duration among ranks
    last_arrivals: dict[str, int] = field(default_factory=dict)  # rank -> times it alone arrived last here


@dataclass
class Straggler:
    """A rank that holds the others back: at collectives it arrives at last, or by compute above the median."""

    rank: int
    reason: str  # "arrives last at collectives" or "compute per step above the median by more than 5%"
    value: float  # the share of matched collectives it arrived last at, or its compute excess over the median
    kind: str = ""  # the collective kind it is most clearly last at (metrics/job/stragglers.py), "" for compute
    imposed_ms: float = 0.0  # Σ over collectives where it alone arrived last of (its start − the second-latest
    # start), per step: what the other ranks would save had it alone been on time
    last_n: int = 0  # collectives of `kind` it alone arrived last at
    matched_n: int = 0  # matched collectives of `kind`
    gain_ms: float | None = None  # per step: replayed with its launch gaps at its peers' median ("simulated"),
    # else the imposed wait ("bound")
    gain_kind: str = ""  # "simulated" or "bound"


@dataclass
class SkewResult:
    """Collectives and send/recv matched across ranks: arrival skew, late ranks, stragglers, the clock shifts used."""

    matched: int
    by_collective: list[CollectiveSkew]
    last_arrivals: dict[str, int]  # rank -> times it arrived last
    host_shift_ms: dict[str, float]  # host -> clock shift applied
    stragglers: list[Straggler]
    late: list[LateArrival] = field(default_factory=list)  # the most skewed matched collectives, late ranks named
    late_ms_by_rank: dict[str, float] = field(default_factory=dict)  # rank -> Σ its lateness where it was late
    late_n_by_rank: dict[str, int] = field(default_factory=dict)  # rank -> matched collectives it was late at
    imposed_ms_by_rank: dict[str, float] = field(default_factory=dict)  # rank -> Σ (its start − last punctual
    # start) where late: the wait it alone imposed on the others (sums over the trace, not per step)
    wait_ms_by_rank: dict[str, float] = field(default_factory=dict)  # rank -> Σ (latest start − its start)
    wait_exposed_ms_by_rank: dict[str, float] | None = None  # rank -> ms of those waits with no compute under
    # them (its exposed communication); None in summaries older than the measure
    schedule_ordered: int = 0  # matched collectives across pipeline stages: no last arrival blamed
    size_mismatches: int = 0  # matched collectives whose ranks disagree on the message size (likely mis-paired)
    p2p: list[P2PMatch] = field(default_factory=list)  # send/recv matched to its peer
    capture_windows: list[CaptureWindow] = field(default_factory=list)  # ranks whose capture starts late / ends early
    partial: int = 0  # collectives only some ranks of their group recorded (capture edges): left out of skew
    by_order: int = 0  # (rank, group, kind) whose completion times fit no alignment: matched by order
    matching_failed: bool = False  # skew or a straggler cost longer than the step: pairs are wrong, no finding
    decided: bool = False  # stragglers decided per kind (metrics/job/stragglers.py); False in older summaries
