"""One measured workload, run in its own process by benchmarks.run (so its process tree can be sampled).

    python -m benchmarks.child llmdiag|hta|orjson|render|idle|ladder SPEC_JSON

Prints one JSON line: wall (s, the work only: imports and interpreter start are excluded), cpu (user +
sys of this process and its reaped workers), the getrusage maxima, and a few numbers to cross-check the
tools (mean overlap %).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _llmdiag(spec: dict) -> dict:
    """analyze_path with its rules: the library call, every stage of the analysis (HTA's counterpart is its
    load + two analyses). Only the imports are outside the timer, here as for HTA (whose module import
    loads all of its analyzers): analyze_path imports the rules lazily, so they are imported first."""
    import llmdiag.diagnose.rules  # noqa: F401 - an import, outside the timer as HTA's are
    from llmdiag.diagnose.io import fastjson
    from llmdiag.diagnose.analyze import analyze_path

    t0, c0 = time.perf_counter(), _cpu()
    a = analyze_path(spec["path"], jobs=spec.get("jobs"), rules=True, exclude_last_step=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    ov = [100 * m.overlap_ratio for m in a.ranks if m.overlap_ratio is not None]
    return {"wall": wall, "cpu": cpu, "ranks": len(a.ranks), "overlap_pct": sum(ov) / len(ov) if ov else None,
            "parser": "msgspec" if fastjson.decoder() else "orjson",
            "issues": [i.message for i in a.issues if i.severity == "error"][:3]}


def _hta(spec: dict) -> dict:
    import logging

    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    t0, c0 = time.perf_counter(), _cpu()
    if spec.get("files"):
        ta = TraceAnalysis(trace_files=dict(enumerate(spec["files"])), trace_dir=os.path.dirname(spec["files"][0]))
    else:
        ta = TraceAnalysis(trace_dir=spec["path"])
    ov = ta.get_comm_comp_overlap(visualize=False)
    ta.get_temporal_breakdown(visualize=False)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    vals = [float(v) for v in ov["comp_comm_overlap_pctg"]]
    return {"wall": wall, "cpu": cpu, "ranks": len(vals), "overlap_pct": sum(vals) / len(vals) if vals else None}


def _orjson(spec: dict) -> dict:
    """The strictest baseline: decompression untimed, and the garbage collector off during the parse (with
    it on, as in a plain script, orjson.loads of a 100 MB trace takes 2-3x longer: every dict it builds
    counts towards a collection)."""
    import gc

    import orjson

    from llmdiag.diagnose.io.loader import read_bytes

    wall = cpu = 0.0
    for p in spec["files"]:
        raw = read_bytes(p)  # not timed: the baseline is the parse of the decompressed bytes
        gc.disable()
        t0, c0 = time.perf_counter(), _cpu()
        doc = orjson.loads(raw)
        wall, cpu = wall + time.perf_counter() - t0, cpu + _cpu() - c0
        gc.enable()
        del doc, raw
    return {"wall": wall, "cpu": cpu, "ranks": len(spec["files"])}


def _idle_worker(args) -> int:
    path, hold = args
    from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job

    run_job(RankJob(path))  # the modules an analysis loads, loaded
    time.sleep(hold)  # alive long enough for the sampler to see every worker at once
    return 0


def _idle(spec: dict) -> dict:
    """The tree an analysis costs before its traces do: this process with the analysis modules loaded, plus
    `jobs` forked workers in the same state, all held alive for `hold` seconds."""
    from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job

    t0 = time.perf_counter()
    run_job(RankJob(spec["path"]))
    jobs, hold = spec.get("jobs", 1), spec.get("hold", 1.0)
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as ex:
            list(ex.map(_idle_worker, [(spec["path"], hold)] * jobs, chunksize=1))
    else:
        time.sleep(hold)
    return {"wall": time.perf_counter() - t0, "cpu": _cpu(), "ranks": 0}


def _render(spec: dict) -> dict:
    """The report of a summary, and the summary's JSON edge against bare orjson on the same bytes (ratios)."""
    import orjson

    from llmdiag.diagnose.model.analysis import Analysis
    from llmdiag.reports.render import render_report

    with open(spec["summary"], "rb") as f:
        raw = f.read()
    t = time.perf_counter()
    data = orjson.loads(raw)
    parse = time.perf_counter() - t
    t = time.perf_counter()
    analysis = Analysis.from_dict(data)
    read = time.perf_counter() - t
    t = time.perf_counter()
    orjson.dumps(data)
    dump = time.perf_counter() - t
    t = time.perf_counter()
    analysis.to_dict()
    write = time.perf_counter() - t
    t0, c0 = time.perf_counter(), _cpu()
    render_report(analysis, spec["out"])
    return {"wall": time.perf_counter() - t0, "cpu": _cpu() - c0, "ranks": len(analysis.ranks),
            "bytes_out": os.path.getsize(spec["out"]), "from_dict_vs_loads": read / parse,
            "to_dict_vs_loads_dumps": write / (parse + dump)}


def _ladder(spec: dict) -> dict:
    """One rung of the scale ladder: the whole analyze command, phase by phase (benchmarks/ladder.py)."""
    from benchmarks.ladder import run_whole

    t0, c0 = time.perf_counter(), _cpu()
    res = run_whole(spec["path"], spec["out"], spec.get("jobs"))
    return {**res, "cpu": _cpu() - c0, "with_gate_s": time.perf_counter() - t0}  # res["wall"]: analyze only


def main() -> None:
    tool, spec = sys.argv[1], json.loads(sys.argv[2])
    res = {"llmdiag": _llmdiag, "hta": _hta, "orjson": _orjson, "render": _render, "idle": _idle,
           "ladder": _ladder}[tool](spec)
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    res.update(maxrss_self=s.ru_maxrss * 1024, maxrss_children=c.ru_maxrss * 1024)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
