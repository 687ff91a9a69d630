"""HTA's launch delay (`ranks[].launch.hta_delay_*`) beside llmdiag's start-to-start one (issue 36 item 5).

HTA 0.5's cuda_kernel_launch_stats: a device event's start − its launch call's END, clipped at 0, for the
calls it reads (cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync, cudaMemsetAsync, MTIA's runFunction),
over the trace as HTA's parse keeps it (with two or more ProfilerSteps, the calls before the last one starts),
on whole-µs times (HTA rounds ns timestamps: start up, end down). Checked on a generated trace with answers
worked by hand, against an independent reading of the raw events of every real fixture with launches (json +
gzip here, no llmdiag code), and against HTA 0.5.0 itself where it is installed."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job
from tests.gen.builder import TraceBuilder

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real"
HTA_CALLS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync",
             "runFunction - job_prep_and_submit_for_execution"}


def _launch(path):
    out = run_job(RankJob(str(path)))
    assert out.metrics is not None
    return out.metrics.launch


def _pair(b: TraceBuilder, call: str, at, dur, cat: str, start, corr: int) -> None:
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": b.pid, "tid": 100, "ts": b._abs(at), "dur": dur,
           "args": {"correlation": corr}})
    b.raw({"ph": "X", "cat": cat, "name": "void k()" if cat == "kernel" else "Memcpy HtoD", "pid": 0, "tid": 7,
           "ts": b._abs(start), "dur": 3, "args": {"device": 0, "stream": 7, "correlation": corr}})


def test_generated_trace_by_hand(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    for k in range(3):
        b.step(k + 1, 1000 * k, 1000 * (k + 1))
    _pair(b, "cudaLaunchKernel", 10, 5, "kernel", 100, 1)  # HTA 100 − 15 = 85; start-to-start 90
    _pair(b, "cudaLaunchKernel", 200, 50, "kernel", 220, 2)  # HTA −30 → 0; start-to-start 20
    _pair(b, "cudaMemcpyAsync", 1100, 4, "gpu_memcpy", 1300, 3)  # HTA 196 (async memcpy: HTA reads it)
    _pair(b, "cudaMemcpy", 1400, 100, "gpu_memcpy", 1410, 4)  # a blocking copy: not a call HTA reads
    _pair(b, "cudaLaunchKernel", 1500.4, 2.2, "kernel", 1510.3, 5)  # whole µs: ceil 1511 − floor 1502.6 = 9
    _pair(b, "cudaLaunchKernel", 2100, 5, "kernel", 2500, 6)  # launched in the last step: HTA drops it
    b.write(tmp_path / "r.json")
    x = _launch(tmp_path / "r.json")
    hta = np.array([85, 0, 196, 9], float)
    assert x.hta_events == 4
    assert x.hta_delay_median_us == pytest.approx(np.median(hta))  # 47
    assert x.hta_delay_p90_us == pytest.approx(np.percentile(hta, 90))
    assert x.hta_delay_max_us == 196
    # llmdiag's start-to-start delay is kept, under its own name, over the analysed steps
    assert x.delay_max_us >= 400  # the last step's 2100 → 2500 is inside its windows
    assert x.delay_median_us != x.hta_delay_median_us


def hta_by_hand(path: Path) -> tuple[int, float]:
    """(pairs, median µs) with HTA 0.5's definition, read from the raw events."""
    with gzip.open(path) as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]

    def stream(e):
        s = (e.get("args") or {}).get("stream")
        return s if isinstance(s, int) else -1

    def corr(e):
        c = (e.get("args") or {}).get("correlation")
        return c if isinstance(c, int) else -1

    def up(x):
        return math.ceil(x)

    def down(x):
        return math.floor(x)

    device = [e for e in ev if stream(e) >= 0 and corr(e) >= 0]
    steps = [e for e in ev if "ProfilerStep" in e.get("name", "") and not (stream(e) >= 0 and corr(e) >= 0)]
    cut = max(up(e["ts"]) for e in steps) if len({e["name"] for e in steps}) > 1 else math.inf
    calls: dict[int, list] = {}
    for e in ev:
        if e.get("name") in HTA_CALLS and stream(e) < 0 and corr(e) >= 0 and up(e["ts"]) < cut:
            calls.setdefault(corr(e), []).append(down(e["ts"] + e["dur"]))
    d = [max(0, up(k["ts"]) - end) for k in device for end in calls.get(corr(k), [])]
    return len(d), float(np.median(d)) if d else math.nan


FIXTURES = sorted(str(p.relative_to(REAL)) for p in [
    *REAL.glob("torchrec/*/*.json.gz"), *REAL.glob("hta/sampled_pair/*.json.gz"), REAL / "hta/nccl_data.json.gz",
    REAL / "tracelens/b200_vllm_tp8_rank0.json.gz", REAL / "hta/ns_resolution_rank-0.pt.trace.json.gz",
]) if REAL.is_dir() else ["hta/nccl_data.json.gz"]  # absent: one case, skipped (or failed in CI) by `real`


@pytest.mark.real(REAL)
@pytest.mark.parametrize("rel", FIXTURES)
def test_real_fixtures_within_one_percent_of_hta(rel):
    n, med = hta_by_hand(REAL / rel)
    x = _launch(REAL / rel)
    assert n > 100 and x.hta_events == n
    assert x.hta_delay_median_us == pytest.approx(med, rel=0.01)


# HTA 0.5.0's own get_cuda_kernel_launch_stats medians (µs), run on these files (docs/metrics.md)
HTA_MEDIANS = {"torchrec/sst_long_a2a_optimizer_3/ip-172-31-16-248.us-east-2.compute.internal_29222."
               "1698955894936500715.pt.trace.json.gz": 11616.5, "hta/nccl_data.json.gz": 3.0,
               "tracelens/b200_vllm_tp8_rank0.json.gz": 4.0}


@pytest.mark.real(REAL)
@pytest.mark.parametrize("rel", sorted(HTA_MEDIANS))
def test_hta_itself(rel, tmp_path):
    """HTA 0.5.0 run on the file where it is installed; else its recorded median."""
    x = _launch(REAL / rel)
    want = HTA_MEDIANS[rel]
    try:
        import logging

        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        TraceAnalysis = None
    if TraceAnalysis is not None:
        logging.getLogger("hta").setLevel(logging.ERROR)
        (tmp_path / "rank0.json.gz").symlink_to(REAL / rel)
        ta = TraceAnalysis(trace_dir=str(tmp_path))
        r = next(iter(ta.t.traces))
        df = ta.get_cuda_kernel_launch_stats(ranks=[r], visualize=False)[r]
        want = float(df["launch_delay"].median())
        assert len(df) == x.hta_events
    assert x.hta_delay_median_us == pytest.approx(want, rel=0.01)
