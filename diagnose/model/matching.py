"""Cross-rank matches of single communications: who arrived late at a collective, and each send/recv pair.

Kept apart from analysis.py (which holds the summaries) so the per-match records have one home; the skew
result carries lists of them.
"""

from __future__ import annotations

from llmdiag.diagnose.model.dc import dataclass, field


@dataclass
class LateArrival:
    """One matched collective with its late ranks: those after the largest gap between consecutive arrivals."""

    pg: str
    kind: str
    ordinal: int  # n-th (pg, kind) collective of the trace, from 0
    ranks: int  # ranks matched
    skew_ms: float  # latest start − earliest start
    transfer_ms: float  # shortest duration among ranks: the collective once everyone is there
    late_ranks: list[int]  # in arrival order
    late_ms: list[float]  # each late rank's start after the earliest start
    schedule_ordered: bool = False  # its ranks sit on different pipeline stages: the schedule orders arrivals
    in_nelems: dict[str, int] = field(default_factory=dict)  # rank -> elements sent (all_to_all(v): sum of splits)
    out_nelems: dict[str, int] = field(default_factory=dict)  # rank -> elements received


@dataclass
class P2PMatch:
    """Send/recv between one ordered pair of ranks in one group, matched by their order on each side."""

    pg: str
    src: int
    dst: int
    matched: int
    unmatched: int  # sends or receives with no partner on the other rank (a trace cut short, a missing rank)
    mean_transfer_ms: float  # from the later of the two posts to the end: the data moving
    mean_wait_ms: float  # from the earlier post to the later: one side waiting for the other
    sender_waits: int  # pairs where the send was posted first (the receiver was late)
    receiver_waits: int  # pairs where the receive was posted first (the sender was late)


@dataclass
class CaptureWindow:
    """A rank whose capture starts after collectives its group's other ranks recorded (or ends before some):
    those collectives are left out of skew rather than paired with the next one (metrics/job/collective_match.py)."""

    rank: int
    lead_n: int  # collectives (over its groups and kinds) the others recorded before this rank's first
    lead_ms: float  # from the earliest collective completion of any rank to this rank's first
    trail_n: int = 0  # collectives the others recorded after this rank's last
    trail_ms: float = 0.0  # from this rank's last collective completion to the latest of any rank
    first_event_ms: float | None = None  # its trace's first event after the earliest other rank's (None unknown)
