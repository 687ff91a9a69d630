"""The whole command as a user runs it, against bare gunzip + orjson.loads of the same bytes (issue 37 item 3).

For each real trace (or folder) `llmdiag analyze PATH --json J --report H -q` runs as a fresh process,
timed from spawn to exit: interpreter start, imports, parse, metrics, rules, summary, terminal and report
all count, as they do for the user. Its baseline is a fresh `python -c` process that decompresses each of
the same files with the standard library (`gzip.decompress`) and parses it with `orjson.loads`, as a plain
script would (garbage collector on): the cheapest honest way to get the same bytes into Python objects.

A round runs every case once on each side, alternating llmdiag and baseline per case, so a load change on
the shared machine hits both; the ratio of a round is total baseline seconds over total llmdiag seconds
(= llmdiag's rate in bytes/s over the baseline's, on the same bytes), and the figure is the median over
`repeats` rounds (5). Wall time and CPU time (user + sys of the process and its reaped workers, from
wait4) are both given; the load average is recorded at start and end. Target (issue 37): ratio >= 0.9.
`--against TREE` adds a third side in every round, the same command run from another checkout (an earlier
commit: `git archive COMMIT | tar -x -C TREE`), so a before/after comparison shares the rounds' load too.

    python -m benchmarks.whole_command [--repeats 5] [--cases nccl_data,a100_16rank] [--jobs N] [--against TREE]
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
REAL = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "real")
TARGET = 0.9
# HTA's real test traces, 122 MB of JSON in all: each one job as a user would analyse it (the pair as its folder).
CASES = [("sampled_pair", "hta/sampled_pair"), ("nccl_data", "hta/nccl_data.json.gz"),
         ("ns_resolution", "hta/ns_resolution_rank-0.pt.trace.json.gz"),
         ("a100_16rank", "hta/a100_16rank_alltoall_rank0.json.gz"),
         ("trace_diff_test", "hta/trace_diff/test.json.gz"), ("trace_diff_control", "hta/trace_diff/control.json.gz")]
BASELINE = "import gzip, sys, orjson\nfor p in sys.argv[1:]:\n    orjson.loads(gzip.decompress(open(p, 'rb').read()))\n"


def cases(real_dir: str = REAL, names: list[str] | None = None) -> list[tuple[str, str, list[str]]]:
    """(name, path, files) of the cases present under `real_dir`."""
    out = []
    for name, rel in CASES:
        p = os.path.join(real_dir, rel)
        if os.path.exists(p) and (not names or name in names):
            files = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".json.gz")) if os.path.isdir(p) else [p]
            out.append((name, p, files))
    return out


def timed(argv: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, float]:
    """(wall s, cpu s) of one process and the workers it reaped, from spawn to exit; raises on failure. Run
    from a neutral `cwd`: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH, so run
    from a checkout it would import that checkout whatever PYTHONPATH says."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.stderr:
        p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1):  # 1: some trace left out (named on stderr); the run still completed
        raise RuntimeError(f"{argv[3:5]}: " + ((err.strip().splitlines() or [f"exit {p.returncode}"])[-1]))
    return wall, ru.ru_utime + ru.ru_stime


def decompressed(files: list[str]) -> int:
    import gzip

    return sum(len(gzip.decompress(open(f, "rb").read())) for f in files)


def measure(real_dir: str = REAL, repeats: int = 5, names: list[str] | None = None, jobs: int | None = None,
            report: bool = True, against: str | None = None, against_jobs: int | None = None) -> dict:
    """Paired rounds over the cases; per case and in all, the medians and the ratio baseline / llmdiag (and
    baseline / the other tree's llmdiag, with `against`)."""
    todo = cases(real_dir, names)
    if not todo:
        raise RuntimeError(f"no real fixtures under {real_dir}")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    other = dict(os.environ, PYTHONPATH=os.path.abspath(against or ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load0 = os.getloadavg()
    names_ = ("llmdiag", "baseline", "against") if against else ("llmdiag", "baseline")
    runs: dict[str, dict[str, list]] = {n: {s: [] for s in names_} for n, _, _ in todo}
    with tempfile.TemporaryDirectory(prefix="llmdiag-whole-") as out:
        def cmd(path: str, jobs: int | None = jobs) -> list[str]:
            args = [sys.executable, "-m", "llmdiag.diagnose.cli.main", "analyze", path, "-q",
                    "--json", os.path.join(out, "s.json")]
            args += ["--report", os.path.join(out, "r.html")] if report else ["--no-report"]
            return args + (["--jobs", str(jobs)] if jobs else [])

        for _, path, files in todo:  # warm the page cache, any bytecode and the compiled templates, every side
            timed(cmd(path), env, out)
            timed([sys.executable, "-c", BASELINE, *files], env, out)
            if against:
                timed(cmd(path, against_jobs), other, out)
        for i in range(max(1, repeats)):
            for name, path, files in todo:
                sides = [("llmdiag", cmd(path), env), ("baseline", [sys.executable, "-c", BASELINE, *files], env)]
                sides += [("against", cmd(path, against_jobs), other)] if against else []
                for side, argv, e in (sides if i % 2 == 0 else sides[::-1]):  # alternate which side goes first
                    runs[name][side].append(timed(argv, e, out))
    per_case, rounds = {}, []
    for name, path, files in todo:
        r = runs[name]
        size = decompressed(files)
        med = {s: [statistics.median(x[k] for x in r[s]) for k in (0, 1)] for s in r}
        per_case[name] = {"mb": round(size / 1e6, 1), "llmdiag_wall": med["llmdiag"][0], "llmdiag_cpu": med["llmdiag"][1],
                          "baseline_wall": med["baseline"][0], "baseline_cpu": med["baseline"][1],
                          "ratio_wall": statistics.median(b[0] / a[0] for a, b in zip(r["llmdiag"], r["baseline"])),
                          "ratio_cpu": statistics.median(b[1] / a[1] for a, b in zip(r["llmdiag"], r["baseline"]))}
    for i in range(max(1, repeats)):
        tot = {s: [sum(runs[n][s][i][k] for n in runs) for k in (0, 1)] for s in names_}
        rounds.append({f"{s}_{k}": tot[s][j] for s in names_ for j, k in enumerate(("wall", "cpu"))})
    mb = sum(c["mb"] for c in per_case.values())
    extra = {}
    if against:
        extra = {"against": os.path.abspath(against) + (f" --jobs {against_jobs}" if against_jobs else ""),
                 "against_ratio_wall": statistics.median(r["baseline_wall"] / r["against_wall"] for r in rounds),
                 "against_ratio_cpu": statistics.median(r["baseline_cpu"] / r["against_cpu"] for r in rounds),
                 "against_wall": statistics.median(r["against_wall"] for r in rounds)}
        for name in per_case:
            r = runs[name]
            per_case[name]["against_wall"] = statistics.median(x[0] for x in r["against"])
            per_case[name]["against_cpu"] = statistics.median(x[1] for x in r["against"])
            per_case[name]["against_ratio_cpu"] = statistics.median(b[1] / a[1] for a, b in zip(r["against"], r["baseline"]))
    return {**extra, "cases": per_case, "mb": mb, "report": report, "repeats": repeats, "target": TARGET,
            "ratio_wall": statistics.median(r["baseline_wall"] / r["llmdiag_wall"] for r in rounds),
            "ratio_cpu": statistics.median(r["baseline_cpu"] / r["llmdiag_cpu"] for r in rounds),
            "llmdiag_wall": statistics.median(r["llmdiag_wall"] for r in rounds),
            "baseline_wall": statistics.median(r["baseline_wall"] for r in rounds),
            "rounds": rounds, "load_start": load0, "load_end": os.getloadavg()}


def line(m: dict) -> str:
    if "error" in m:
        return f"whole command on the real fixtures: failed: {m['error']}"
    ok = "met" if m["ratio_wall"] >= m["target"] else "NOT met"
    head = (f"whole command (analyze {'--json --report' if m['report'] else '--json --no-report'}) on "
            f"{len(m['cases'])} real traces, {m['mb']:.0f} MB: {m['llmdiag_wall']:.2f} s against gunzip + orjson "
            f"{m['baseline_wall']:.2f} s; rate ratio (median of {m['repeats']} paired rounds) wall "
            f"{m['ratio_wall']:.2f}, cpu {m['ratio_cpu']:.2f} (target >= {m['target']}: {ok}); load "
            f"{m['load_start'][0]:.1f} -> {m['load_end'][0]:.1f}")
    if "against" in m:
        head += (f"\n  against {m['against']}: {m['against_wall']:.2f} s, ratio wall {m['against_ratio_wall']:.2f}, "
                 f"cpu {m['against_ratio_cpu']:.2f}")
    rows = [f"  {n} ({c['mb']:g} MB): llmdiag {c['llmdiag_wall']:.3f} s wall / {c['llmdiag_cpu']:.3f} s cpu, baseline "
            f"{c['baseline_wall']:.3f} / {c['baseline_cpu']:.3f}, ratio {c['ratio_wall']:.2f} / {c['ratio_cpu']:.2f}"
            + (f"; against: {c['against_wall']:.3f} s wall / {c['against_cpu']:.3f} s cpu, ratio cpu "
               f"{c['against_ratio_cpu']:.2f}" if "against_cpu" in c else "")
            for n, c in m["cases"].items()]
    return "\n".join([head, *rows])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--jobs", type=int, help="llmdiag's --jobs (default: its own, all cores)")
    ap.add_argument("--no-report", dest="report", action="store_false", help="time analyze --no-report instead")
    ap.add_argument("--real-dir", default=REAL)
    ap.add_argument("--against", metavar="TREE", help="also time the command from this checkout, in the same rounds")
    ap.add_argument("--against-jobs", type=int, help="--jobs for the --against side (`--against . --against-jobs 1`: "
                    "this tree without the second core)")
    a = ap.parse_args(argv)
    from benchmarks.run import byte_compile

    byte_compile()
    if a.against:
        import compileall

        compileall.compile_dir(a.against, quiet=2)
    print(line(measure(a.real_dir, a.repeats, a.cases.split(",") if a.cases else None, a.jobs, a.report, a.against,
                       a.against_jobs)))


if __name__ == "__main__":
    main()
