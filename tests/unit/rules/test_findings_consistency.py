"""Findings consistent with the page (issue 28 item 4): severity from one rule of the gain, one finding per piece
of time, a planted `--inject-slow` named as such. Answers are computed here from the placed numbers, not by the
code under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.rules.overlaps import counted_gain_ms
from tests.gen.pipeline import Case
from tests.gen.pipeline import write as write_pipeline
from tests.gen.scenario_traces import low_busbw

REAL = (Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "real").resolve()
MI300 = REAL / "tracelens" / "mi300_ddp8_actckpt_rank0.json.gz"
CAP = "upper bound, topology assumed: medium at most"
LEVEL = {"low": 0, "medium": 1, "high": 2}


def _expected(f, step_ms: float) -> str:
    """The documented rule, written out again (docs/recommendations.md "Severity")."""
    if f.gain_ms is None:
        return f.severity if f.id in ("memory_near_capacity", "contaminated_timings") else "low"
    share = f.gain_ms / step_ms
    sev = "high" if share >= 0.10 else "medium" if share >= 0.03 else "low"
    return "medium" if sev == "high" and CAP in f.expected_gain else sev


def _consistent(a) -> None:
    """Every finding's level is the rule's; no larger gain below a smaller one without the cap's words."""
    for f in a.findings:
        assert f.severity == _expected(f, a.step_ms), (f.id, f.severity, f.gain_ms, a.step_ms)
        if CAP in f.expected_gain:
            assert f.evidence.source == "assumed"
    gains = [f for f in a.findings if f.gain_ms is not None]
    for f in gains:
        for g in gains:
            if f.gain_ms > g.gain_ms and LEVEL[f.severity] < LEVEL[g.severity]:
                assert CAP in f.expected_gain, (f.id, f.severity, f.gain_ms, g.id, g.severity, g.gain_ms)


def _bw(tmp_path: Path, hidden: int) -> tuple:
    low_busbw(tmp_path, busbw_gbps=56.0, hidden=hidden)
    return analyze_path(str(tmp_path), jobs=1)


def test_exposed_comm_and_low_busbw_share_one_piece_of_time(tmp_path):
    """2 ranks, two 64 MiB all-reduces per step at 56 GB/s with nothing under them: exposed_comm and low_busbw
    both take their gain from that exposed time; exposed_comm (overlap removes it) keeps it, low_busbw is part
    of the same time, counted once."""
    a = _bw(tmp_path, hidden=0)
    ar_us = round((32 << 20) * 2 / 56e3)  # the placed all-reduce: bytes / busbw
    exposed_ms = 2 * ar_us / 1000
    by = {f.id: f for f in a.findings}
    ec, bw = by["exposed_comm"], by["low_busbw"]
    assert ec.claims == bw.claims == "exposed_comm"
    assert ec.part_of is None and bw.part_of == "exposed_comm"
    assert f"part of the same {exposed_ms:.2f} ms of exposed communication per step as `exposed_comm`" \
        in bw.expected_gain
    assert counted_gain_ms(a.findings) == pytest.approx(sum(f.gain_ms for f in a.findings
                                                            if f.gain_ms is not None and f.id != "low_busbw"))
    assert ec.gain_ms <= exposed_ms + 1e-6
    _consistent(a)


def test_low_busbw_alone_keeps_its_gain(tmp_path):
    """Silent twin: the all-reduce mostly hidden (900 µs under the GEMM), exposed_comm silent: low_busbw is no
    part of anything."""
    a = _bw(tmp_path, hidden=900)
    assert "exposed_comm" not in {f.id for f in a.findings}
    (bw,) = [f for f in a.findings if f.id == "low_busbw"]
    assert bw.part_of is None and "part of the same" not in bw.expected_gain
    assert counted_gain_ms(a.findings) == pytest.approx(bw.gain_ms)
    _consistent(a)


@pytest.mark.real(MI300)
def test_mi300_ddp_page_is_consistent():
    """The issue's case: a 54 % low_busbw gain (topology assumed) sat at medium under a 12.9 % exposed_comm high
    with no word why, both claiming rank 0's exposed communication."""
    a = analyze_path(str(MI300), jobs=1)
    _consistent(a)
    by = {f.id: f for f in a.findings}
    ec, bw = by["exposed_comm"], by["low_busbw"]
    assert bw.evidence.source == "assumed" and bw.severity == "medium" and CAP in bw.expected_gain
    assert bw.part_of == "exposed_comm" and ec.part_of is None
    exposed = a.ranks[0].exposed_comm_ms  # the breakdown's number for rank 0
    assert f"part of the same {exposed:.2f} ms" in bw.expected_gain
    dc = by["ddp_grad_copy"]  # DDP's copies back out of the buckets (0.28 ms): other time than the exposed comm
    dm = by["data_movement"]  # MIOpen's layout transposes (1.36 ms, compute-stream time beside the collectives)
    # the recomputed forward's time with no collective running (activation_recompute): its layout transposes may
    # also be data_movement's (at most ~0.1 ms here, said in its text, not subtracted)
    rc = by["activation_recompute"]
    assert counted_gain_ms(a.findings) == pytest.approx(ec.gain_ms + dc.gain_ms + dm.gain_ms + rc.gain_ms)


def _pp(tmp_path: Path, spec: str | None) -> tuple:
    """2 stages, stage 0's forward and backward take twice as long (the generator's slow stage); a manifest with
    or without the knob that planted it."""
    write_pipeline(Case(p=2, m=4, slow_stage=0, slow_factor=2, steps=3), tmp_path)
    man = {"schema_version": 1, "workload": "pp2", "world_size": 2, "status": "ok",
           "layout": {"dp": 1, "fsdp": 1, "tp": 1, "pp": 2, "cp": 1},
           "options": {"inject_slow": spec} if spec else {}}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    return analyze_path(str(tmp_path), jobs=1)


def test_planted_slowdown_is_named(tmp_path):
    a = _pp(tmp_path, "rank:0:2")
    (f,) = [f for f in a.findings if f.id == "pipeline_imbalance"]
    words = "rank 0's compute was slowed ×2 on purpose (--inject-slow rank:0:2, recorded in the manifest)"
    assert words in f.evidence.text and words in f.action
    assert "move layers" not in f.action and "moving one layer" not in f.expected_gain
    assert f.evidence.source == "manifest" and "manifest.options.inject_slow" in f.evidence.events
    for g in a.findings:  # no finding blames rank 0 without the planted words
        if 0 in g.evidence.ranks and g.id in ("pipeline_imbalance", "stragglers"):
            assert "--inject-slow rank:0:2" in g.action
    _consistent(a)


@pytest.mark.parametrize("spec", [None, "rank:1:2:backward", "rank:0:two"])
def test_no_knob_on_the_blamed_rank_no_planted_words(tmp_path, spec):
    """Twins: no option, the knob on the other rank, or a value that is not the knob's syntax: the imbalance is
    the user's, the layer move stays."""
    a = _pp(tmp_path, spec)
    (f,) = [f for f in a.findings if f.id == "pipeline_imbalance"]
    assert "inject-slow" not in f.action + f.evidence.text + f.title
    assert "move layers from stage 0" in f.action


@pytest.mark.parametrize("spec", ["rank:2:2:forward", None])
def test_planted_straggler_is_named(tmp_path, spec):
    """4 ranks, rank 2 arrives 600 µs late at every all-reduce (tests/gen/scenario_traces.py); with the knob on
    rank 2 in the manifest the straggler finding names it and advises no host change; without it, as before."""
    from tests.gen.scenario_traces import straggler

    straggler(tmp_path, 600)
    man = {"schema_version": 1, "workload": "dp4", "world_size": 4, "status": "ok",
           "layout": {"dp": 4, "fsdp": 1, "tp": 1, "pp": 1, "cp": 1},
           "options": {"inject_slow": spec} if spec else {}}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    (f,) = [f for f in analyze_path(str(tmp_path), jobs=1).findings if f.id == "stragglers"]
    assert f.evidence.ranks == [2]
    words = "rank 2's forward was slowed ×2 on purpose (--inject-slow rank:2:2:forward, recorded in the manifest)"
    if spec:
        assert words in f.action and words in f.evidence.text and "inspect host" not in f.action
    else:
        assert "inject-slow" not in f.action + f.evidence.text + f.title
