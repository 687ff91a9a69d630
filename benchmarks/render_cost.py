"""What the HTML report adds to `llmdiag analyze`, as a ratio: the same command line with and without
`--no-report`, on one generated single-rank trace (35 MB decompressed by default) or a given trace (`--trace`;
`make bench` also runs HTA's 35 MB trace_diff/control.json.gz).

Each run is a fresh `python -m llmdiag.diagnose.cli.main analyze ... -q` process, timed from spawn to exit: the
report's cost is its imports as much as its drawing, so interpreter start and imports are included on both
sides (the user pays them too). Runs alternate (without, with, with, without, ...) so a load change on the
shared machine hits both sides; the figure is the median over pairs of with / without, in wall time and in CPU
time (user + sys of the process and its workers, from wait4). Target: with / without ≤ 1.25 (issue 15), now
≤ 1.10 (issue 37).

    python -m benchmarks.render_cost [--mb 35] [--repeats 5] [--trace PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.10


def _run(args: list[str]) -> tuple[float, float]:
    """(wall, cpu) of one fresh `analyze ARGS -q` process, spawn to exit."""
    from benchmarks.whole_command import timed

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return timed([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", *args, "-q"], env, ROOT)


def measure(path: str, repeats: int = 5) -> dict:
    """Median wall and CPU of `analyze` without and with the report, and the median ratio over pairs."""
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="llmdiag-rc-") as out:
        j, h = os.path.join(out, "s.json"), os.path.join(out, "r.html")
        _run([path, "--no-report", "--json", j])  # the page cache, and the report's compiled templates
        _run([path, "--json", j, "--report", h])
        without, with_ = [], []
        for i in range(max(1, repeats)):
            sides = [(without, [path, "--no-report", "--json", j]), (with_, [path, "--json", j, "--report", h])]
            for runs, args in (sides if i % 2 == 0 else sides[::-1]):
                runs.append(_run(args))
        size = os.path.getsize(h)
    med = lambda runs, k: statistics.median(r[k] for r in runs)
    ratio = lambda k: statistics.median(b[k] / a[k] for a, b in zip(without, with_))
    return {"without_s": med(without, 0), "with_s": med(with_, 0), "ratio": ratio(0),
            "without_cpu": med(without, 1), "with_cpu": med(with_, 1), "ratio_cpu": ratio(1), "target": TARGET,
            "report_bytes": size, "load_start": load0, "load": os.getloadavg()[0],
            "runs_without": [[round(x, 3) for x in r] for r in without],
            "runs_with": [[round(x, 3) for x in r] for r in with_]}


def line(m: dict, mb: float, what: str = "") -> str:
    what = what or f"1 rank x {mb:g} MB"
    if "error" in m:
        return f"report cost, {what}: failed: {m['error']}"
    ok = lambda r: "met" if r <= m["target"] else "NOT met"
    return (f"report cost, {what}: analyze {m['without_s']:.2f} s, with the report {m['with_s']:.2f} s: ratio "
            f"{m['ratio']:.2f} wall, {m['ratio_cpu']:.2f} cpu ({m['without_cpu']:.2f} -> {m['with_cpu']:.2f} s; target "
            f"<= {m['target']:.2f}: {ok(m['ratio'])} / {ok(m['ratio_cpu'])}; {m['report_bytes'] / 1e3:.0f} kB of HTML; "
            f"load {m.get('load_start', m['load']):.1f} -> {m['load']:.1f})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=35)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trace", help="a trace or folder to time instead of the generated one")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    a = ap.parse_args(argv)
    from benchmarks import generate
    from benchmarks.run import byte_compile

    byte_compile()
    if a.trace:
        print(line(measure(a.trace, a.repeats), 0, os.path.basename(a.trace.rstrip("/"))))
        return
    path = os.path.join(a.data_dir, f"cost_1x{a.mb:g}")
    generate.write_set(path, 1, a.mb)
    print(line(measure(path, a.repeats), a.mb))


if __name__ == "__main__":
    main()
