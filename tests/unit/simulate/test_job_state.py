"""The job assembly resolved (metrics/job/state.py) is the one the replay, the what-if and the timeline read.

A byte-identical copy of one rank's trace in a sub-folder is a duplicate the assembly resolves (one kept,
`ranks_duplicate` names it): the replay and the what-if then answer as without the copy. A host clock offset
planted in a generated pipeline (one rank's clock reads D ahead while its capture starts with the others', so
the trace origins hide it and only the matched all-reduces show it) is found once, and the replay, the what-if
and the timeline all put that rank's events on the same clock: the generated all-reduce ends together there.
The what-if syncs the collectives the skew matched, not each rank's n-th.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import llmdiag.diagnose.analyze as an
from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.export.passthrough import PID_STRIDE
from llmdiag.diagnose.export.timeline import build_timeline
from tests.gen.pipeline import ALLREDUCE, Case, build, simulate, write

CASE = Case(p=4, m=8, slow_stage=3, lat_us=30, steps=3)


def _whatif(a):
    return dataclasses.asdict(a.whatif)


def test_a_duplicate_trace_in_a_subfolder_keeps_the_whatif(tmp_path):
    write(CASE, tmp_path)
    plain = analyze_path(str(tmp_path), jobs=1, rules=False)
    assert plain.whatif is not None and not plain.whatif.missing
    (tmp_path / "copy").mkdir()
    shutil.copyfile(tmp_path / "rank1.pt.trace.json.gz", tmp_path / "copy" / "rank1.pt.trace.json.gz")
    dup = analyze_path(str(tmp_path), jobs=1, rules=False)
    assert dup.ranks_duplicate == [1] and [r.rank for r in dup.ranks] == [0, 1, 2, 3]
    assert dup.whatif is not None and dup.whatif.missing == []
    assert _whatif(dup) == _whatif(plain)
    assert dup.pipeline.replay == plain.pipeline.replay is not None
    assert [(q.schedule, q.microbatches, q.step_ms) for q in dup.pipeline.predictions] == \
        [(q.schedule, q.microbatches, q.step_ms) for q in plain.pipeline.predictions]


AHEAD_US = {2: 7_000, 3: 3_000}  # rank -> how far its host's clock reads ahead (µs)


def _planted(tmp_path) -> None:
    """Each stage on a host of its own; the clocks of ranks 2 and 3 read AHEAD_US ahead, and each of those
    ranks' captures starts that much earlier (an op there), so its first event reads as the others' do: the
    trace origins show no offset."""
    builders, _ = build(CASE)
    for s, b in enumerate(builders):
        b.host_name = f"node{s}"
        if d := AHEAD_US.get(b.rank):
            for e in b.events:
                if "ts" in e:
                    e["ts"] += d
            b.cpu_op("aten::empty", 0, 1)  # true time -d, read on this clock as the others' time 0
        b.write(f"{tmp_path}/rank{b.rank}.pt.trace.json.gz")


def test_one_clock_shift_read_by_the_replay_the_whatif_and_the_timeline(tmp_path, monkeypatch):
    _planted(tmp_path)
    seen: dict = {}
    import llmdiag.diagnose.simulate.kineto as kineto
    import llmdiag.diagnose.simulate.replay as replay

    def keep(name, real):
        def f(*args, **kw):
            seen.setdefault(name, args)
            return real(*args, **kw)
        return f

    monkeypatch.setattr(an, "complete_from_job", keep("job", an.complete_from_job))
    monkeypatch.setattr(replay, "fit", keep("fit", replay.fit))
    monkeypatch.setattr(kineto, "analyse", keep("sim", kineto.analyse))
    tracks: dict = {}
    a = analyze_path(str(tmp_path), jobs=1, rules=False, tracks=tracks)
    job = seen["job"][0]
    origin = {r.rank: r.origin_us for r in a.ranks}
    assert len(set(origin.values())) == 1  # the offset is hidden from the origins: the collectives find it
    # the independent answer: rank r's times on the true clock are its own minus AHEAD_US[r]
    true = {r: round((origin[r] - origin[0]) * 1000) - AHEAD_US.get(r, 0) * 1000 for r in origin}
    assert {r: s - job.shift_ns[0] for r, s in job.shift_ns.items()} == true
    assert {r.rank: r.clock_shift_ns for r in a.ranks} == job.shift_ns  # what the timeline applies
    assert seen["fit"][3] == job.shift_ns  # the replay's link fit
    assert a.whatif is not None and not a.whatif.missing
    # the what-if's graph: each step's all-reduce ends together on every rank
    sim = seen["sim"][0]
    ar = sim.optype == "allreduce"
    assert ar.sum() == CASE.p * CASE.steps
    for k in range(CASE.steps):
        ends = (sim.start + sim.duration)[ar & (sim.step == k)]
        assert np.ptp(ends) == pytest.approx(0, abs=1e-9)
    # the timeline: the same
    tl = build_timeline(a, tracks)["traceEvents"]
    ends_by_rank: dict = {}
    for e in tl:
        if e.get("ph") == "X" and e.get("name") == ALLREDUCE:
            ends_by_rank.setdefault(e["pid"] // PID_STRIDE, []).append(e["ts"] + e["dur"])
    assert sorted(ends_by_rank) == [0, 1, 2, 3]
    first = [sorted(v) for v in ends_by_rank.values()]
    for k in range(CASE.steps):
        assert max(x[k] for x in first) - min(x[k] for x in first) == pytest.approx(0, abs=1e-3)


def test_the_whatif_syncs_the_collectives_the_assembly_matched(tmp_path):
    """Rank 0's capture lacks the first step's all-reduce: its first all-reduce is the others' second. The skew
    matches them by sequence number, and the what-if syncs what the skew matched (by each rank's n-th, its
    all-reduce would fall in different steps on different ranks and no graph be built): the replay without
    launch delays is the generator's own schedule."""
    builders, _ = build(CASE)
    first = min((e for e in builders[0].events if e.get("name") == ALLREDUCE), key=lambda e: e["ts"])
    builders[0].events = [e for e in builders[0].events if e is not first and not (
        e.get("name") == "record_param_comms" and e["args"].get("Collective name") == "allreduce"
        and e["args"].get("Seq") == 1)]
    for b in builders:
        b.write(f"{tmp_path}/rank{b.rank}.pt.trace.json.gz")
    w = analyze_path(str(tmp_path), jobs=1, rules=False).whatif
    assert w is not None and w.missing == []
    assert w.no_delay_step_ms == pytest.approx((simulate(CASE).window_us + CASE.allreduce_us) / 1e3, rel=1e-6)
