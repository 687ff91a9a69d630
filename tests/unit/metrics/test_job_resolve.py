"""Resolution freezes the Job, and the Analysis is a function of it (metrics/job/resolve.py, sections.py).

A generated 4-stage pipeline with an all-reduce over the stages: the Job is frozen (no field rebinds), building
the Analysis twice from it gives equal summaries (no section writes what another reads), the build leaves the
Job's own skew as resolved (the compute stragglers go on a copy) and the replay its pipeline, and `analyze_path` gives the same summary as
resolve + build done by hand (no later patch step changes it but the rules and the step cap).
"""

from __future__ import annotations

import dataclasses
import glob

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.metrics.job.resolve import resolve_job
from llmdiag.diagnose.metrics.job.sections import build_analysis
from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from llmdiag.diagnose.model.analysis import AnalysisOptions
from tests.gen.pipeline import Case, write

CASE = Case(p=4, m=4, lat_us=30, steps=3)


def _job(tmp_path):
    write(CASE, tmp_path)
    outs = [run_job(RankJob(p)) for p in sorted(glob.glob(f"{tmp_path}/*.json.gz"))]
    return resolve_job(outs, None, source=str(tmp_path), skipped=[])


def _summary(a) -> dict:
    d = a.to_dict()
    d.pop("provenance", None)
    return d


def test_the_job_is_frozen_and_the_analysis_a_function_of_it(tmp_path):
    job = _job(tmp_path)
    assert [o.rank for o in job.ranks] == [0, 1, 2, 3] and job.world == 4 and job.missing == []
    assert job.pipeline is not None and len(job.chains) == 1 and job.skew is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.layout = None  # type: ignore[misc]
    before = (list(job.skew.stragglers), job.skew.decided, list(job.issues))
    opts = AnalysisOptions(files=4)
    one = build_analysis(job, name="x", opts=opts, version="t")
    two = build_analysis(job, name="x", opts=opts, version="t")
    assert _summary(one) == _summary(two)
    assert one.critical_path is not None  # read from the ranks' path hops: still there for the second build
    assert (list(job.skew.stragglers), job.skew.decided, list(job.issues)) == before
    assert one.skew is not job.skew and one.skew.decided
    assert one.layout == job.layout and one.layout["pp"] == 4  # pp inferred by resolution, read as resolved
    job.release()
    assert all(o.path_hops is None for o in job.in_order)


def test_analyze_path_is_resolve_then_build(tmp_path):
    job = _job(tmp_path)
    from llmdiag.diagnose.analyze import complete_from_job, kineto_whatif

    pipeline = complete_from_job(job)
    assert pipeline is not job.pipeline and pipeline.replay is not None and job.pipeline.replay is None  # a copy
    by_hand = build_analysis(job, name=tmp_path.name, opts=AnalysisOptions(files=4), version="t",
                             pipeline=pipeline, whatif=kineto_whatif(job))
    a = analyze_path(str(tmp_path), jobs=1, rules=False)
    mine, theirs = _summary(by_hand), _summary(a)
    for d in (mine, theirs):
        d.pop("options"), d.pop("llmdiag_version")
    assert mine == theirs
