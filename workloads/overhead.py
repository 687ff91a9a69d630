"""Step time and profiler overhead per layout: `python -m llmdiag.workloads.overhead [--out DIR] [layout ...]`.

A layout is a workload string, optionally followed by run options in the same argument
(`"ep2 --moe-experts 4"`).

Runs each layout through the real `llmdiag run` (one after another, never two at once), then reads the
manifests: per rank, the median step time of the profiled (active) steps against the median of the
unprofiled steps that follow (medians: a shared 2-core machine has outliers), then the median over ranks.
Each layout runs `--repeat` times, round-robin, so a burst of load hits several layouts rather than every run
of one; the table reports medians over runs and the range of the unprofiled step time, in markdown
(docs/workloads.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

LAYOUTS = ["dp2", "fsdp2", "tp2", "pp2", "tp2pp2", "cp2"]
ARGS = ["--profile-steps", "2,2,6", "--steps", "24", "--device", "cpu"]


def measure(out: str, spec: str) -> dict:
    workload, *extra = spec.split()
    cmd = [sys.executable, "-m", "llmdiag.diagnose.cli.main", "run", "--workload", workload, "--out", out, *ARGS, *extra]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    st = m["rank_status"].values()
    p = m["profiler"]
    first, end = p["wait"] + p["warmup"], p["wait"] + p["warmup"] + p["active"]
    prof = statistics.median(statistics.median(s["step_times_ms"][first:end]) for s in st)
    unprof = statistics.median(statistics.median(s["step_times_ms"][end:]) for s in st)
    trace_mb = statistics.median(os.path.getsize(os.path.join(out, s["trace"])) for s in st) / 2**20
    return {"workload": spec, "ranks": m["world_size"], "oversubscribed": m["oversubscribed"],
            "unprofiled_ms": unprof, "profiled_ms": prof, "overhead_ms": prof - unprof,
            "overhead_pct": 100 * (prof - unprof) / unprof, "trace_mb": trace_mb,
            "active": m["profiler"]["active"]}


def combine(runs: list[dict]) -> dict:
    """Several runs of one layout: medians, plus the range of the unprofiled step time."""
    med = {k: statistics.median(r[k] for r in runs) for k in ("unprofiled_ms", "profiled_ms", "trace_mb")}
    med["overhead_ms"] = statistics.median(r["overhead_ms"] for r in runs)
    med["overhead_pct"] = 100 * med["overhead_ms"] / med["unprofiled_ms"]
    lo, hi = min(r["unprofiled_ms"] for r in runs), max(r["unprofiled_ms"] for r in runs)
    return {**runs[0], **med, "range": f"{lo:.0f}–{hi:.0f}", "runs": len(runs)}


def table(rows: list[dict]) -> str:
    lines = ["| layout | ranks | step, unprofiled (ms) | range over runs | step, profiled (ms) | overhead per step "
             "| trace per rank |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        over = " (oversubscribed)" if r["oversubscribed"] else ""
        lines.append(f"| {r['workload']} | {r['ranks']}{over} | {r['unprofiled_ms']:.1f} | {r.get('range', '')} | "
                     f"{r['profiled_ms']:.1f} | {r['overhead_ms']:+.1f} ms ({r['overhead_pct']:+.0f} %) | "
                     f"{r['trace_mb']:.2f} MB gz ({r['active']} steps) |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("layouts", nargs="*", default=LAYOUTS)
    p.add_argument("--out", default=os.path.join("runs", "overhead"))
    p.add_argument("--repeat", type=int, default=3, help="runs per layout, round-robin over the layouts")
    a = p.parse_args()
    results: dict[str, list[dict]] = {w: [] for w in a.layouts}
    for i in range(a.repeat):
        for w in a.layouts:
            out = os.path.join(a.out, f"{w.replace(' ', '').replace('--', '-')}-{i}")
            if os.path.exists(out):
                os.rename(out, f"{out}.old{os.getpid()}")
            results[w].append(measure(out, w))
            print(table(results[w][-1:]).splitlines()[-1], flush=True)
    print(table([combine(results[w]) for w in a.layouts]))


if __name__ == "__main__":
    main()
