"""Where one whole `analyze --json --report` process spends its CPU, phase by phase (issue 37's second pass).

For each real trace of `benchmarks.whole_command`, a fresh interpreter imports what the command imports in
the command's order (click, the CLI, numpy as `analyze` loads it, the analysis, the rules, jinja2, the
report), each import group timed on its own, then runs the command with its phases wrapped: the per-rank
parse and metrics (the engine's jobs), the cross-rank assembly, the rules, the summary's bytes and its write,
the report's context, its render and its write. CPU time (`time.process_time`, this process and its
threads) is steadier than wall time on a shared machine; each figure is the minimum over `repeats` processes
(the run least disturbed by the others' jobs). `interpreter` is a bare `python -c pass` of the same Python.

    python -m benchmarks.whole_phases [--repeats 5] [--cases nccl_data,a100_16rank] [--no-report]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

from benchmarks.whole_command import REAL, ROOT, cases

CHILD = r'''
import json, sys, time
T = time.process_time
t0 = T()
acc = {}
def mark(name, since):
    now = T()
    acc[name] = acc.get(name, 0.0) + now - since
    return now
report = "--no-report" not in sys.argv
t = t0
import click
t = mark("import click", t)
import llmdiag.diagnose.cli.main as main_
t = mark("import the CLI group", t)
from llmdiag.diagnose.engine.blas import load_numpy_single_threaded
load_numpy_single_threaded()
import numpy
t = mark("import numpy", t)
import llmdiag.diagnose.analyze as an
import llmdiag.diagnose.cli.analyze as ca
t = mark("import the analysis (io, metrics, model)", t)
import llmdiag.diagnose.rules as rules
from llmdiag.diagnose.model import summary
t = mark("import the rules and the summary writer", t)
if report:
    import jinja2
    t = mark("import jinja2", t)
    import llmdiag.reports.render as rr
    t = mark("import the report (context, charts, views)", t)
def wrap(mod, name, label):
    f = getattr(mod, name)
    def timed(*a, **k):
        s = T()
        try:
            return f(*a, **k)
        finally:
            acc[label] = acc.get(label, 0.0) + T() - s
    setattr(mod, name, timed)
wrap(an, "run_jobs", "parse + per-rank metrics")
wrap(an, "resolve_job", "cross-rank assembly")  # resolution and the build: what `assemble` was
wrap(an, "build_analysis", "cross-rank assembly")
wrap(rules, "findings", "rules")
wrap(ca, "json_safe", "summary bytes")
wrap(ca, "write_json", "summary write")
if report:
    wrap(rr, "build", "report context")
    wrap(rr, "render_html", "report render (context included)")
    wrap(rr, "write_atomic", "report write")
t = T()
sys.argv = ["llmdiag", *sys.argv[1:]]
code = 0
try:
    main_.main()
except SystemExit as e:
    code = e.code
acc["the command after its imports"] = T() - t
acc["in-process total"] = T() - t0
print("PHASES " + json.dumps(acc), file=sys.stderr)
sys.exit(code)
'''


def phases(path: str, report: bool, env: dict, out: str) -> dict:
    # -j 1: every phase in this one process, where its CPU time is read (by default the command forks the
    # rank's work and its critical path to the second core: engine/fork.py, io/forked.py)
    args = [sys.executable, "-c", CHILD, "analyze", path, "-q", "-j", "1", "--json", os.path.join(out, "s.json")]
    args += ["--report", os.path.join(out, "r.html")] if report else ["--no-report"]
    done = subprocess.run(args, env=env, cwd=out, capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, 1) or "PHASES " not in done.stderr:  # 1: some trace left out, named on stderr
        said = [x for x in done.stderr.strip().splitlines() if not x.startswith("PHASES ")]
        raise RuntimeError(f"{path}: " + (said or [f"exit {done.returncode}"])[-1])
    return json.loads(done.stderr.rsplit("PHASES ", 1)[1])


def interpreter(env: dict, out: str) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "pass"], env=env, cwd=out, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime


def measure(repeats: int = 5, names: list[str] | None = None, report: bool = True, real_dir: str = REAL) -> dict:
    """{case: {phase: min CPU seconds}}, plus the bare interpreter's, for the cases present."""
    import tempfile

    from benchmarks.run import byte_compile

    byte_compile()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="llmdiag-phases-") as out:
        for name, path, _ in cases(real_dir, names):
            phases(path, report, env, out)  # warm: page cache, bytecode, the template cache
            runs = [phases(path, report, env, out) for _ in range(max(1, repeats))]
            res[name] = {k: min(r.get(k, 0.0) for r in runs) for k in runs[0]}
        res["interpreter"] = min(interpreter(env, out) for _ in range(max(1, repeats)))
    return res


def table(res: dict) -> str:
    names = [n for n in res if n != "interpreter"]
    keys = list(res[names[0]]) if names else []
    rows = ["| phase (CPU ms, min) | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    rows += [f"| {k} | " + " | ".join(f"{res[n].get(k, 0.0) * 1000:.1f}" for n in names) + " |" for k in keys]
    rows.append(f"| interpreter start (`python -c pass`) | {res['interpreter'] * 1000:.1f} (every case) |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--no-report", dest="report", action="store_false", help="time analyze --no-report instead")
    a = ap.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.1f}")
    print(table(measure(a.repeats, a.cases.split(",") if a.cases else None, a.report)))
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
