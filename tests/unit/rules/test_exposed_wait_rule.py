"""exposed_comm takes out of a rank's exposed communication only the exposed part of its waits for later peers
(skew.wait_exposed_ms_by_rank), never the part under compute. Summaries built by hand: the answers are the
numbers placed in them."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import summary, typed

STRAGGLER = 5


def _job(exposed_share: float | None) -> dict:
    """Every rank's comm 20 % overlapped (role unknown: exposed_comm's), 80 % exposed (the straggler, rank 5: 40 %). The other ranks wait
    for it as long as their whole exposed communication per step, `exposed_share` of it with no compute under it
    (None: a summary older than the measure, which records the whole waits only)."""
    s = summary()
    for r in s["ranks"]:
        for c in r["comm_by_kind"]:
            c["pg"], c["overlapped_ms"], c["overlap_ratio"] = "misc", 0.2 * c["total_ms"], 0.2
        r["exposed_comm_ms"] = (0.4 if r["rank"] == STRAGGLER else 0.8) * r["comm_ms"]  # the worst rank: a peer
        r["idle"] = {"idle_ms": 2.0, "unattributed_ms": 1.0, "host_bound_ms": 1.0}
    s["skew"]["stragglers"] = [{"rank": STRAGGLER, "reason": "arrives last at 20 of 24 alltoall", "value": 20 / 24,
                                "kind": "alltoall", "imposed_ms": 30.0, "last_n": 20, "matched_n": 24,
                                "gain_ms": 30.0, "gain_kind": "simulated"}]
    s["skew"]["decided"], s["skew"]["last_arrivals"] = True, {str(STRAGGLER): 20}
    peers = [r for r in s["ranks"] if r["rank"] != STRAGGLER]
    s["skew"]["wait_ms_by_rank"] = {str(r["rank"]): r["exposed_comm_ms"] * len(r["steps"]) for r in peers}
    if exposed_share is not None:
        s["skew"]["wait_exposed_ms_by_rank"] = {str(r["rank"]): exposed_share * r["exposed_comm_ms"] * len(r["steps"])
                                                for r in peers}
    return s


def _exposed_comm(s):
    return [f for f in run_rules(typed(s)) if f.id == "exposed_comm"]


def test_only_the_exposed_part_of_the_waits_is_taken_out():
    s = _job(0.25)
    (f,) = _exposed_comm(s)
    peer = max((r for r in s["ranks"] if r["rank"] != STRAGGLER), key=lambda r: r["exposed_comm_ms"] / r["step_time_ms"])
    exp = peer["exposed_comm_ms"]
    assert f"rank {peer['rank']} is exposed {exp:.2f} ms per step in all" in f.evidence.text
    assert f"of which {exp * 0.25:.2f} ms is waiting" in f.evidence.text
    assert "with no compute under it: taken out above" in f.evidence.text
    mean = sum(r["exposed_comm_ms"] * (1.0 if r["rank"] == STRAGGLER else 0.75) for r in s["ranks"]) / len(s["ranks"])
    assert f"exposed {mean:.2f} ms per step" in f.evidence.text
    assert f"straggler rank(s) {STRAGGLER}" in f.action


@pytest.mark.parametrize("share", [1.0, None])
def test_waits_exposed_whole_leave_the_peers_nothing(share):
    """The twin: every wait exposed (or an older summary: the whole waits): the peers' exposure is all waiting, so
    the finding is at most the straggler's own."""
    fs = _exposed_comm(_job(share))
    assert all(f.ranks == [STRAGGLER] for f in fs)
