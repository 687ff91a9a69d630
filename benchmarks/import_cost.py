"""What `llmdiag analyze` pays in imports before it reads a byte (issue #30 item 6): every `analyze`, `check`
and pool worker pays it again, and on a small trace it is most of the command.

`python -X importtime -m llmdiag.diagnose.cli.main analyze TRACE --no-report -q` on one generated single-rank
trace, a fresh process each time; the figure is the sum of the self times of every module it imports (the
interpreter's own start-up modules included). Two baselines, both measured in this run: numpy's cumulative line
in the same output (the issue's own basis: "numpy 0.12 s" of its 0.55 s; same process, same moment, so the
steadiest), and `python -X importtime -c "import numpy"` alternated with the command (a separate process: the
ratio is the median over pairs). llmdiag's modules are byte-compiled first (`run.byte_compile`), as an install
leaves them. Targets: 0.25 s, and 0.25 / 0.12 = 2.08× numpy's line, the ratio to compare across machines.

    python -m benchmarks.import_cost [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 0.25
TARGET_RATIO = 0.25 / 0.12  # the target over numpy's line in the same -X importtime output, as the issue measured
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def parse(stderr: str, cumulative: bool = False) -> dict[str, int]:
    """{module: self µs} from `-X importtime` lines (a module is listed once, where it was first imported);
    its cumulative µs (itself and what it imported first) with `cumulative`."""
    return {m[4]: int(m[2] if cumulative else m[1]) for m in map(_LINE.match, stderr.splitlines()) if m}


def _run(args: list[str]) -> tuple[dict[str, int], int]:
    """Self µs per module, and numpy's cumulative µs (0 where numpy was not imported)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-X", "importtime", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(next((x for x in reversed(done.stderr.splitlines()) if not x.startswith("import time:")),
                                f"exit {done.returncode}"))
    return parse(done.stderr), parse(done.stderr, cumulative=True).get("numpy", 0)


def _group(mod: str) -> str:
    """The package a module's time is booked to: llmdiag's stages (llmdiag.diagnose.metrics.rank), else the top."""
    parts = mod.split(".")
    return ".".join(parts[:4 if mod.startswith("llmdiag.diagnose.metrics.") else 3]) if parts[0] == "llmdiag" else parts[0]


def measure(trace: str, repeats: int = 15) -> dict:
    """The analyze command's imports (s: median and fastest of `repeats`), its ratio to numpy's line in the same
    output (median over runs), and to numpy imported alone in the run beside it (median over pairs); the module
    count and the heaviest packages of the median analyze run."""
    with tempfile.TemporaryDirectory(prefix="llmdiag-imp-") as out:
        cmd = ["-m", "llmdiag.diagnose.cli.main", "analyze", trace, "--no-report", "-q", "--json",
               os.path.join(out, "s.json")]
        _run(cmd)  # the page cache, and any bytecode not yet written
        runs, alone = [], []
        for _ in range(max(1, repeats)):
            runs.append(_run(cmd))
            alone.append(sum(_run(["-c", "import numpy"])[0].values()) / 1e6)
    tot = [sum(r.values()) / 1e6 for r, _ in runs]
    mid = runs[tot.index(sorted(tot)[len(tot) // 2])][0]
    heavy: Counter = Counter()
    for mod, us in mid.items():
        heavy[_group(mod)] += us
    return {"analyze_s": statistics.median(tot), "fastest_s": min(tot),
            "numpy_line_s": statistics.median(n / 1e6 for _, n in runs),
            "ratio": statistics.median(t / (n / 1e6) for t, (_, n) in zip(tot, runs)),
            "numpy_alone_s": statistics.median(alone), "ratio_alone": statistics.median(t / b for t, b in zip(tot, alone)),
            "target_s": TARGET_S, "target_ratio": TARGET_RATIO, "modules": len(mid),
            "heaviest": {k: round(v / 1e6, 4) for k, v in heavy.most_common(8)},
            "runs": [round(x, 4) for x in tot], "runs_numpy_alone": [round(x, 4) for x in alone]}


def line(m: dict) -> str:
    if "error" in m:
        return f"analyze imports, 1 rank: failed: {m['error']}"
    ok = lambda met: "met" if met else "NOT met"
    top = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in list(m["heaviest"].items())[:5])
    return (f"analyze imports, 1 rank (-X importtime): median {m['analyze_s'] * 1e3:.0f} ms, fastest "
            f"{m['fastest_s'] * 1e3:.0f} ms, {m['modules']} modules (target <= {m['target_s'] * 1e3:.0f} ms: "
            f"{ok(m['analyze_s'] <= m['target_s'])}); over its numpy line ({m['numpy_line_s'] * 1e3:.0f} ms) "
            f"{m['ratio']:.2f} (target <= {m['target_ratio']:.2f}: {ok(m['ratio'] <= m['target_ratio'])}); over "
            f"numpy imported alone ({m['numpy_alone_s'] * 1e3:.0f} ms) {m['ratio_alone']:.2f}; heaviest (ms): {top}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    a = ap.parse_args(argv)
    from benchmarks import generate
    from benchmarks.run import byte_compile

    byte_compile()
    path = generate.write_set(os.path.join(a.data_dir, "imports_1x0.2"), 1, 0.2)[0]
    print(line(measure(path, a.repeats)))


if __name__ == "__main__":
    main()
