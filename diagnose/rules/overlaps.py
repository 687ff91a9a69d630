"""One finding per piece of time: findings whose gains come from the same measured time are ranked, not summed.

Each rule's claim (the time its gain removes) is one entry of CLAIMS, kept here rather than in the rules so the
table of who claims what reads in one place. Findings with the same claim on shared ranks form a group; the one
first in KEEPERS (its action removes the time rather than shortens it) keeps the gain, every other says "part of
the same N ms … as <id>" and sets `part_of`, so `counted_gain_ms` (any total) counts the time once. Device idle
that several findings take their gain from (host_bound, host_op_stall, the chores) is split by the regions it lies
in and counted once in rules/shared_time.py.
"""

from __future__ import annotations

from llmdiag.diagnose.model import stats as statistics
from llmdiag.diagnose.model.analysis import Analysis, Finding
from llmdiag.diagnose.model.format import fmt
from llmdiag.diagnose.rules.shared_time import share_idle

EXPOSED = "exposed_comm"
CLAIMS = {  # rule id → the piece of time its gain is taken from
    "exposed_comm": EXPOSED, "dp_overlap": EXPOSED, "tp_exposed": EXPOSED, "moe_exposed_a2a": EXPOSED,
    "low_busbw": EXPOSED,
}
# Who keeps a shared claim's gain: overlapping the comm with compute removes the exposed time; a faster link
# (low_busbw) only shortens it, so it ranks last.
KEEPERS = ("exposed_comm", "dp_overlap", "tp_exposed", "moe_exposed_a2a", "low_busbw")
WORDS = {EXPOSED: "exposed communication"}


def rank_overlaps(a: Analysis, fs: list[Finding]) -> list[Finding]:
    """Set `claims` on every finding, and `part_of` (with its words in the gain text) on those whose claimed time
    another finding, earlier in KEEPERS and on a shared rank, already keeps."""
    for f in fs:
        f.claims = CLAIMS.get(f.id, f.claims)
    kept: list[Finding] = []
    for f in sorted((f for f in fs if f.claims and f.gain_ms is not None), key=lambda f: KEEPERS.index(f.id)
                    if f.id in KEEPERS else len(KEEPERS)):
        keeper = next((k for k in kept if k.claims == f.claims
                       and set(k.evidence.ranks) & set(f.evidence.ranks)), None)
        if keeper is None:
            kept.append(f)
            continue
        f.part_of = keeper.id
        f.shared_ms = f.gain_ms or 0.0
        f.expected_gain += (f"; part of the same {_claimed(a, f.claims, keeper, f)} as `{keeper.id}`: not "
                            "counted again")
    share_idle(a, fs)  # device idle two findings both take their gain from (rules/shared_time.py)
    return fs


def _claimed(a: Analysis, claim: str, k: Finding, f: Finding) -> str:
    """The shared time in words: for exposed communication, the measured exposed comm per step on the ranks both
    findings name (the number the breakdown table prints)."""
    shared = set(k.evidence.ranks) & set(f.evidence.ranks)
    xs = [r.exposed_comm_ms for r in a.ranks if r.rank in shared]
    if claim == EXPOSED and xs:
        return f"{fmt(statistics.fmean(xs), 'ms')} of {WORDS[claim]} per step"
    return WORDS.get(claim, claim)


def counted_gain_ms(fs: list[Finding]) -> float:
    """The total gain of a list of findings, each piece of time once: findings that are part of another's skip,
    and each other counts what findings above it do not already count (`shared_ms`)."""
    return sum(f.gain_ms - f.shared_ms for f in fs if f.gain_ms is not None and f.part_of is None)
