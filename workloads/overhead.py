"""Step time and profiler overhead per layout: `python -m workloads.overhead [--out DIR] [layout ...]`.

Runs each layout through the real `llmdiag run` (one after another, never two at once), then reads the
manifests: per rank, the mean step time of the profiled (active) steps against the mean of the unprofiled
steps that follow; the table shows the median over ranks. Prints a markdown table (docs/workloads.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

LAYOUTS = ["dp2", "fsdp2", "tp2", "pp2", "tp2pp2", "cp2"]
ARGS = ["--profile-steps", "1,2,5", "--steps", "18", "--device", "cpu"]


def measure(out: str, workload: str) -> dict:
    cmd = [sys.executable, "-m", "diagnose.cli", "run", "--workload", workload, "--out", out, *ARGS]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    st = m["rank_status"].values()
    unprof = statistics.median(s["unprofiled_step_ms"] for s in st)
    prof = statistics.median(s["profiled_step_ms"] for s in st)
    trace_mb = statistics.median(os.path.getsize(os.path.join(out, s["trace"])) for s in st) / 2**20
    return {"workload": workload, "ranks": m["world_size"], "oversubscribed": m["oversubscribed"],
            "unprofiled_ms": unprof, "profiled_ms": prof, "overhead_ms": prof - unprof,
            "overhead_pct": 100 * (prof - unprof) / unprof, "trace_mb": trace_mb,
            "active": m["profiler"]["active"]}


def table(rows: list[dict]) -> str:
    lines = ["| layout | ranks | step, unprofiled (ms) | step, profiled (ms) | overhead per step | trace per rank |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        over = " (oversubscribed)" if r["oversubscribed"] else ""
        lines.append(f"| {r['workload']} | {r['ranks']}{over} | {r['unprofiled_ms']:.1f} | {r['profiled_ms']:.1f} | "
                     f"{r['overhead_ms']:+.1f} ms ({r['overhead_pct']:+.0f} %) | "
                     f"{r['trace_mb']:.2f} MB gz ({r['active']} steps) |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("layouts", nargs="*", default=LAYOUTS)
    p.add_argument("--out", default=os.path.join("runs", "overhead"))
    a = p.parse_args()
    rows = []
    for w in a.layouts:
        out = os.path.join(a.out, w)
        if os.path.exists(os.path.join(out, "manifest.json")):
            os.rename(out, f"{out}.old{os.getpid()}")
        rows.append(measure(out, w))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
