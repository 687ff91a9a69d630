"""The exposed-communication gate per collective kind and the wait words (diagnose/rules/comm_kinds.py): answers
computed here from the placed numbers."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from llmdiag.diagnose.rules.comm_kinds import kind_exposures, open_kinds, open_words, wait_words


def _row(nsteps: int, *cs):
    r = NS(rank=0, nsteps=nsteps)
    return (r, 0.0, 0.0, [NS(kind=k, pg=pg, total_ms=t, overlapped_ms=o) for k, pg, t, o in cs])


def test_a_hidden_all_reduce_does_not_lift_an_exposed_all_to_all():
    """2 steps: all_to_all 20 ms total, 8 overlapped (40 %, 6 ms/step exposed); all-reduce 60 ms, 59 overlapped.
    Pooled 67/80 = 83.75 % passes a 70 % gate; the all_to_all alone (6 ms of a 100 ms step) does not."""
    rows = [_row(2, ("alltoall", "", 20.0, 8.0), ("allreduce", "", 60.0, 59.0))]
    ex = {x.kind: x for x in kind_exposures(rows)}
    assert ex["alltoall"].ratio == pytest.approx(0.4) and ex["alltoall"].exposed_ms == pytest.approx(6.0)
    assert ex["allreduce"].ratio == pytest.approx(59 / 60) and ex["allreduce"].exposed_ms == pytest.approx(0.5)
    (o,) = open_kinds(rows, 100.0)
    assert o.kind == "alltoall"
    assert open_kinds(rows, 121.0) == []  # 6 ms under 5 % of a 121 ms step
    words = open_words([o], rows, 67 / 80)
    assert "alltoall alone: overlap ratio 40.0%, exposed 6.00 ms per step" in words and "allreduce 98.3%" in words


def test_a_mostly_hidden_kind_stays_closed_whatever_its_exposure():
    """all_to_all 75 % overlapped, 25 ms/step exposed of a 100 ms step: no open kind."""
    assert open_kinds([_row(1, ("alltoall", "", 100.0, 75.0))], 100.0) == []


def test_wait_words_name_the_whole_and_whom():
    assert wait_words(0, 43.5, 0.0, [2]) == ""
    peer = wait_words(0, 43.5, 30.0, [2])
    assert "rank 0 is exposed 43.50 ms per step in all, of which 30.00 ms is waiting" in peer
    assert "straggler rank(s) 2 among them" in peer
    own = wait_words(2, 25.97, 5.21, [2])
    assert "peers arriving after it" in own and "straggler rank(s)" not in own


def test_comm_latency_bound_fires_on_small_exchanges_only(tmp_path):
    """One rank of 300, gloo (tests/expert/planted_recall_f.py): two 170 ms all-reduces per 200 ms step. Of 321,271
    and 2,082,411 floats: 598 exchanges of 16,024 B, busbw 4,807,364 B / 170 ms x 598/300 = 56.4 MB/s: fires,
    exposed 175 ms per step (the two overlap 165 ms: counted once, the union [10, 185] ms of the 200 ms step): that
    is the gain, a bound, 87.5 % of the step: high. Of 16 Mi and 10 Mi floats: busbw 639 MB/s, silent."""
    from llmdiag.diagnose.analyze import analyze_path
    from tests.expert.planted_recall_f import _gloo_job

    _gloo_job(str(tmp_path / "lat"), "p", (321_271, 2_082_411))
    (f,) = [f for f in analyze_path(str(tmp_path / "lat"), jobs=1).findings if f.id == "comm_latency_bound"]
    busbw = 4_807_364 / 0.170 * 598 / 300 / 1e6
    assert f"busbw {busbw:.1f} MB/s" in f.evidence.text and "598 sequential exchanges of 15.65 KiB" in f.evidence.text
    assert "exposed 175.00 ms per step" in f.evidence.text and f.gain_kind == "bound"
    assert f.gain_ms == pytest.approx(175.0, abs=1e-3) and f.severity == "high" and "up to 175.00 ms" in f.expected_gain
    _gloo_job(str(tmp_path / "bw"), "p", (16 * 2**20, 10 * 2**20))
    assert "comm_latency_bound" not in {f.id for f in analyze_path(str(tmp_path / "bw"), jobs=1).findings}
