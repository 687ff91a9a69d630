"""What the rules say once a straggler is decided (metrics/job/stragglers.py): the cause read from the straggler's
own timeline, the `async_op=True` advice only where the host waits in the collective, and a skew longer than
a step reported as a matching failure, never as a finding. Summaries built by hand: the answers are the
numbers placed in them."""

from __future__ import annotations

from llmdiag.diagnose.metrics.job.straggler_issues import alignment_issues as _alignment_issues
from llmdiag.diagnose.model.analysis import CollectiveSkew, SkewResult, Straggler
from llmdiag.diagnose.rules import findings as run_rules
from tests.gen.summaries import summary, typed


def _exposed(s, comm_wait_ms: float):
    """Every rank's comm 20 % overlapped (unknown role), the host waiting `comm_wait_ms` per step in it."""
    for r in s["ranks"]:
        for c in r["comm_by_kind"]:
            c["pg"] = "misc"
            c["overlapped_ms"] = 0.2 * c["total_ms"]
            c["overlap_ratio"] = 0.2
        r["exposed_comm_ms"] = 0.8 * r["comm_ms"]
        r["idle"] = {"idle_ms": comm_wait_ms + 1.0, "comm_wait_ms": comm_wait_ms, "host_bound_ms": 1.0}
    return s


def _action(s) -> str:
    return next(f.action for f in run_rules(typed(s)) if f.id == "exposed_comm")


def test_async_op_advised_only_where_the_host_waits_in_the_collective():
    assert "async_op=True" in _action(_exposed(summary(), comm_wait_ms=10.0))
    twin = _action(_exposed(summary(), comm_wait_ms=0.0))  # launched asynchronously: the host never waits
    assert "async_op" not in twin and "already launched asynchronously" in twin


def _late(s, rank: int, imposed: float, idle: dict | None = None, compute_extra: float = 0.0):
    s["skew"]["stragglers"] = [{"rank": rank, "reason": f"arrives last at 20 of 24 alltoall; imposing {imposed} ms",
                                "value": 20 / 24, "kind": "alltoall", "imposed_ms": imposed, "last_n": 20,
                                "matched_n": 24, "gain_ms": imposed, "gain_kind": "simulated"}]
    s["skew"]["decided"] = True
    s["skew"]["last_arrivals"] = {str(rank): 20}
    s["skew"]["wait_ms_by_rank"] = {str(r["rank"]): imposed * r["nsteps"] if "nsteps" in r else imposed * 3
                                    for r in s["ranks"] if r["rank"] != rank}
    for r in s["ranks"]:
        r["idle"] = {"idle_ms": 2.0, "unattributed_ms": 1.0, "host_bound_ms": 1.0}
        if r["rank"] == rank:
            r["idle"].update(idle or {})
            r["compute_ms"] += compute_extra
    return s


def _straggler_finding(s):
    return next(f for f in run_rules(typed(s)) if f.id == "stragglers")


def test_host_stall_is_named_not_uneven_work():
    f = _straggler_finding(_late(summary(), 5, 30.0, idle={"idle_ms": 31.0, "unattributed_ms": 30.0}))
    assert "no profiled host op" in f.evidence.text and "uneven work" not in f.action
    assert f.gain_ms == 30.0 and f.gain_kind == "estimate" and "simulated" in f.expected_gain


def test_uneven_work_only_when_its_compute_differs():
    s = _late(summary(), 5, 30.0, compute_extra=30.0)
    gemm = next(k for k in s["ranks"][5]["top_kernels"] if k["kind"] == "compute")
    gemm["total_ms"] += 90.0  # 30 ms per step more in its GEMM than any peer's
    f = _straggler_finding(s)
    assert "uneven work" in f.action and "computes" in f.evidence.text
    assert f"`{gemm['name']}` +" in f.evidence.text


def test_peers_waiting_for_the_straggler_get_no_async_advice():
    s = _exposed(summary(), comm_wait_ms=10.0)
    s = _late(s, 5, 30.0, idle={"idle_ms": 31.0, "unattributed_ms": 30.0})
    for r in s["ranks"]:
        r["idle"]["comm_wait_ms"] = 10.0
    s["skew"]["wait_ms_by_rank"] = {str(r["rank"]): 0.3 for r in s["ranks"] if r["rank"] != 5}  # 0.1 ms a step
    fs = run_rules(typed(s))
    (exp,) = [f for f in fs if f.id == "exposed_comm"]
    assert "async_op" not in exp.action and "straggler rank(s) 5" in exp.action


def test_skew_longer_than_a_step_is_a_matching_failure():
    sk = SkewResult(matched=10, by_collective=[CollectiveSkew("", "allreduce", 10, 150.0, 380.0, 1.0)],
                    last_arrivals={"2": 8}, host_shift_ms={},
                    stragglers=[Straggler(2, "arrives last", 0.8, kind="allreduce", imposed_ms=733.0)])
    issues = []
    _alignment_issues(sk, 250.0, 260.0, "job", issues)
    assert sk.matching_failed and not [x for x in sk.stragglers if x.kind]
    assert any("matching failure" in i.message for i in issues)
    sk2 = SkewResult(matched=10, by_collective=[CollectiveSkew("", "allreduce", 10, 5.0, 9.0, 1.0)],
                     last_arrivals={"2": 8}, host_shift_ms={},
                     stragglers=[Straggler(2, "arrives last", 0.8, kind="allreduce", imposed_ms=26.0)])
    issues = []
    _alignment_issues(sk2, 250.0, 260.0, "job", issues)  # the silent twin: a real 26 ms straggler
    assert not sk2.matching_failed and len(sk2.stragglers) == 1 and not issues
