"""The scale ladder (issue #21): the whole `analyze` command, rules, summary, terminal and report included,
on generated jobs of 64 to 16,384 ranks, timed per phase in a fresh process per rung.

    python -m benchmarks.run --cases ladder            # 64, 256, 1,024, 4,096, 16,384 ranks
    python -m benchmarks.run --cases ladder --ladder 64,1024 --ladder-mb 0.05

Phases: map = per-rank parse (worker pool), reduce = cross-rank assemble, rules, render = summary
(written from the dataclasses) + terminal text + HTML report. Coordinator peak RSS is the analysing process's own
getrusage maximum (the workers are separate processes and are not the coordinator). Targets (docs/benchmarks.md):
time per rank at 16,384 within 1.5x that at 1,024; reduce + rules + render ≤ 15 % of the whole at
16,384; coordinator peak RSS ≤ 2 GB; summary ≤ 64 MB.
"""

from __future__ import annotations

import os
import resource
import shutil
import time

RUNGS = (64, 256, 1024, 4096, 16384)
MB_PER_RANK = 0.05  # decompressed MB per generated rank: small, so 16,384 ranks fit a laptop's disk and a minute


def run_whole(path: str, out: str, jobs: int | None = None) -> dict:
    """`llmdiag analyze PATH --json out/summary.json --report out/report.html`, phase by phase, in this process
    (benchmarks/child.py `ladder`)."""
    from llmdiag.diagnose.analyze import analyze_path
    from llmdiag.diagnose.cli.analyze import frozen_heap, json_safe, write_json
    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.reports.render import render_report

    os.makedirs(out, exist_ok=True)
    phases: dict = {}
    t0 = time.perf_counter()
    a = analyze_path(path, jobs=jobs, timings=phases)
    t = time.perf_counter()
    jpath, hpath = os.path.join(out, "summary.json"), os.path.join(out, "report.html")
    with frozen_heap():  # as the command does (cli/analyze.py)
        summary, shown = json_safe(a)
        write_json(summary, jpath)
        text = render(a, width=160, colour=False)
        render_report(shown, hpath)
    phases["render"] = time.perf_counter() - t
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before check/diff read summaries here
    gate = _gate_times(jpath)
    return {"wall": wall, "ranks": len(a.ranks), "phases": phases, "findings": len(a.findings),
            "coordinator_peak_rss": peak,
            "summary_bytes": os.path.getsize(jpath), "report_bytes": os.path.getsize(hpath),
            "terminal_lines": text.count("\n") + 1, **gate,
            "errors": [i.message for i in a.issues if i.severity == "error"][:3]}


def _gate_times(summary: str) -> dict:
    """`llmdiag check S --baseline S` and `llmdiag diff S S` on the rung's summary: seconds and lines printed
    (not part of the analyze command's wall time)."""
    from click.testing import CliRunner

    from llmdiag.diagnose.cli.main import main

    out = {}
    for name, args in (("check", ["check", summary, "--baseline", summary]), ("diff", ["diff", summary, summary])):
        t = time.perf_counter()
        res = CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": ""})
        out[f"{name}_s"] = time.perf_counter() - t
        out[f"{name}_lines"] = res.output.count("\n") if res.exit_code == 0 else f"exit {res.exit_code}"
    return out


def table(rows: list[dict]) -> str:
    """The ladder as a Markdown table, with the issue's four targets judged from it."""
    head = ("| ranks | MB | whole s | map s | reduce s | rules s | render s | ms per rank | coordinator peak RSS MB "
            "| summary MB | report MB | terminal lines | check s (lines) | diff s (lines) | CPU ms per rank |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    ok = {r["ranks"]: r["ladder"] for r in rows if "wall" in r.get("ladder", {})}
    for r in rows:
        m = r.get("ladder", {})
        if "wall" not in m:
            out.append(f"| {r['ranks']} | failed: {m.get('error', '?')[:200]} |" + " |" * 13)
            continue
        p = m["phases"]
        out.append(f"| {r['ranks']:,} | {r.get('bytes', 0) / 1e6:.0f} | {m['wall']:.1f} | {p.get('map', 0):.1f} "
                   f"| {p.get('reduce', 0):.2f} | {p.get('rules', 0):.2f} | {p.get('render', 0):.2f} "
                   f"| {1e3 * m['wall'] / m['ranks']:.2f} | {m['coordinator_peak_rss'] / 1e6:.0f} "
                   f"| {m['summary_bytes'] / 1e6:.1f} | {m['report_bytes'] / 1e6:.2f} | {m['terminal_lines']} "
                   f"| {m.get('check_s', 0):.1f} ({m.get('check_lines')}) | {m.get('diff_s', 0):.1f} ({m.get('diff_lines')}) "
                   f"| {1e3 * m.get('cpu', 0) / m['ranks']:.2f} |")
    if 1024 in ok and 16384 in ok:
        a, b = ok[1024], ok[16384]
        lin = (b["wall"] / b["ranks"]) / (a["wall"] / a["ranks"])
        tail = sum(b["phases"].get(k, 0) for k in ("reduce", "rules", "render")) / b["wall"]
        cpu = (b["cpu"] / b["ranks"]) / (a["cpu"] / a["ranks"]) if a.get("cpu") and b.get("cpu") else float("nan")
        out += ["", f"- time per rank at 16,384 / at 1,024: {lin:.2f}x wall, {cpu:.2f}x CPU (target ≤ 1.5x: "
                f"{'met' if lin <= 1.5 else 'NOT met'})",
                f"- reduce + rules + render at 16,384: {100 * tail:.1f} % of the whole (target ≤ 15 %: "
                f"{'met' if tail <= 0.15 else 'NOT met'})",
                f"- coordinator peak RSS at 16,384: {b['coordinator_peak_rss'] / 1e6:.0f} MB (target ≤ 2,000 MB: "
                f"{'met' if b['coordinator_peak_rss'] <= 2e9 else 'NOT met'})",
                f"- summary at 16,384: {b['summary_bytes'] / 1e6:.1f} MB (target ≤ 64 MB: "
                f"{'met' if b['summary_bytes'] <= 64e6 else 'NOT met'})"]
    return "\n".join(out)


def clean(path: str) -> None:
    """Generated rungs are large (16,384 files): removed once measured."""
    shutil.rmtree(path, ignore_errors=True)
