"""What the HTML report adds to `llmdiag analyze`, as a ratio: the same command line with and without
`--no-report`, on one generated single-rank trace (35 MB decompressed by default).

Each run is a fresh `python -m llmdiag.diagnose.cli.main analyze ... -q` process, timed from spawn to exit: the
report's cost is its imports as much as its drawing, so interpreter start and imports are included on both
sides (the user pays them too). Runs alternate (without, with, without, ...) so a load change on the shared
machine hits both sides; the medians give the ratio. Target (issue 15): with / without ≤ 1.25.

    python -m benchmarks.render_cost [--mb 35] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.25


def _run(args: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", *args, "-q"], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
    return wall


def measure(path: str, repeats: int = 5) -> dict:
    """Median wall of `analyze` without and with the report, and their ratio."""
    with tempfile.TemporaryDirectory(prefix="llmdiag-rc-") as out:
        j, h = os.path.join(out, "s.json"), os.path.join(out, "r.html")
        _run([path, "--no-report", "--json", j])  # warm the parse cache and the page cache for both sides
        without, with_ = [], []
        for _ in range(max(1, repeats)):
            without.append(_run([path, "--no-report", "--json", j]))
            with_.append(_run([path, "--json", j, "--report", h]))
        size = os.path.getsize(h)
    a, b = statistics.median(without), statistics.median(with_)
    return {"without_s": a, "with_s": b, "ratio": b / a, "target": TARGET, "report_bytes": size,
            "runs_without": [round(x, 3) for x in without], "runs_with": [round(x, 3) for x in with_]}


def line(m: dict, mb: float) -> str:
    if "error" in m:
        return f"report cost, 1 rank x {mb:g} MB: failed: {m['error']}"
    return (f"report cost, 1 rank x {mb:g} MB: analyze {m['without_s']:.2f} s, with the report {m['with_s']:.2f} s: "
            f"ratio {m['ratio']:.2f} (target <= {m['target']:.2f}; {m['report_bytes'] / 1e3:.0f} kB of HTML)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=35)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    a = ap.parse_args(argv)
    from benchmarks import generate

    path = os.path.join(a.data_dir, f"cost_1x{a.mb:g}")
    generate.write_set(path, 1, a.mb)
    print(line(measure(path, a.repeats), a.mb))


if __name__ == "__main__":
    main()
