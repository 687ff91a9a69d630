"""The critical path is not stated on an event-sampled capture, and the exposure rules stay silent there
(tests/expert/planted_recall_h.py's job: a two-rank all-reduce under a GEMM, complete and event-sampled). The
answers are the placed durations: each step 10.25 ms, the all-reduce 7 ms; sampled, 1 host op in 6 kept."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.terminal import render
from llmdiag.diagnose.model.analysis import Analysis
from llmdiag.diagnose.rules import comm, findings as run_rules
from llmdiag.reports.critical_path import critical_path_view
from tests.expert.planted_recall_h import AR_MS, COMM, STEPS, _job

EXPOSURE = {"exposed_comm", "dp_overlap", "tp_exposed", "low_busbw", "moe_exposed_a2a"}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[bool, Analysis]:
    out = {}
    for sampled in (True, False):
        d = tmp_path_factory.mktemp(f"sampled_{sampled}")
        _job(str(d), "p", sampled)
        out[sampled] = analyze_path(str(d))
    return out


def test_sampled_ranks_state_no_path(jobs):
    a = jobs[True]
    assert a.critical_path is None and a.critical_path_note.startswith("not determined: every rank's capture")
    for r in a.ranks:
        assert r.chores is not None and r.chores.sampled_share is not None and r.chores.sampled_share < 0.9
        assert r.critical_path is None and len(r.steps) == STEPS and all(s.critical_path is None for s in r.steps)
        assert r.critical_path_note.startswith("not determined: event-sampled capture (")
    d = a.to_dict()  # the summary: null with its reason, and back
    assert d["critical_path"] is None and d["ranks"][0]["critical_path"] is None
    assert Analysis.from_dict(d).ranks[1].critical_path_note == a.ranks[1].critical_path_note


def test_complete_twin_states_the_path(jobs):
    a = jobs[False]
    assert a.critical_path is not None and a.critical_path_note == ""
    for r in a.ranks:
        assert r.critical_path is not None and r.critical_path_note == ""
        assert r.critical_path.length_ms == pytest.approx(10.0, abs=0.05)  # the device window: GEMM A + B
        assert r.exposed_comm_ms == pytest.approx(0.0, abs=0.01)  # the all-reduce under GEMM A


def test_sampled_exposure_is_not_claimed(jobs, monkeypatch):
    """The sample shows the all-reduce 100 % exposed (its GEMM dropped): 7 ms per step. No exposure finding at
    any severity; without the gate the same trace fires exposed_comm (the failure the gate exists for)."""
    a = jobs[True]
    assert all(r.exposed_comm_ms == pytest.approx(AR_MS, abs=0.01) for r in a.ranks)
    fs = run_rules(a)
    assert not [f.id for f in fs if f.id in set(COMM)]
    assert "sampled_capture" in [f.id for f in fs]
    monkeypatch.setattr(comm, "overlap_unmeasured", lambda r: False)
    assert any(f.id in EXPOSURE for f in run_rules(a))


def test_terminal_and_report_say_why(jobs):
    a = jobs[True]
    text = render(a, 120)
    assert "Critical path of ranks 0-1: not determined: event-sampled capture" in " ".join(text.split())
    assert "Job critical path: not determined" in " ".join(text.split())
    assert "Critical path per rank (" not in text
    v = critical_path_view(a, lambda x, k, u, *rest: x)
    assert v is not None and not v["rows"] and v["unstated"].startswith("Critical path of ranks 0-1")
    assert v["job"] is None and v["job_unstated"].startswith("Job critical path: not determined")
    assert "Ranks 0-1: event-sampled capture. Their overlap and exposed time are what the sample shows" in " ".join(
        text.split())  # under the communication table (views.sampled_overlap_note)
    t = render(jobs[False], 120)
    assert "Critical path per rank (" in t and "not determined" not in t and "event-sampled" not in t


def test_mixed_job_keeps_complete_ranks_path(tmp_path):
    """Rank 1 sampled, rank 0 complete: rank 0 keeps its own path; the job's is not stated (the path crosses
    ranks at collectives, and rank 1's arrivals are among the dropped events); rank 1's exposure is not judged,
    rank 0's (0 ms: its all-reduce under its GEMM) is."""
    _job(str(tmp_path), "p", True, only=1)
    a = analyze_path(str(tmp_path))
    r0, r1 = a.ranks
    assert r0.critical_path is not None and r0.critical_path_note == "" and r0.exposed_comm_ms < 0.01
    assert r1.critical_path is None and r1.critical_path_note and r1.exposed_comm_ms == pytest.approx(AR_MS, abs=0.01)
    assert a.critical_path is None and a.critical_path_note.startswith("not determined: rank 1's capture is")
    assert not [f.id for f in run_rules(a) if f.id in set(COMM)]
