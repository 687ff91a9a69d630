"""Analyzer benchmarks: llmdiag vs HolisticTraceAnalysis vs bare orjson.loads, same inputs, one process tree each.

    python -m benchmarks.run                 # `make bench`: real fixtures, 8 x 100 MB, 64 x 20 MB, 1 x 1 GB, 8..256 ranks
    python -m benchmarks.run --quick         # smoke run, about a minute
    python -m benchmarks.run --full          # the same sizes, baselines repeated too (median of 3)
    python -m benchmarks.run --cases real,r8 --repeats 5 --no-hta
    python -m benchmarks.run --cases ladder      # the scale ladder, 64..16,384 ranks, whole command (ladder.py)
    python -m benchmarks.run --cases whole,render_cost   # the whole command against gunzip + orjson; the report's cost

Every measurement is a fresh `python -m benchmarks.child` process whose whole tree (workers included) is
sampled from /proc for peak RSS and PSS (benchmarks/proctree.py). llmdiag is timed as `analyze_path` with its
rules, HTA as its load + overlap + temporal breakdown: library calls both. Times exclude interpreter start
and imports (llmdiag's modules byte-compiled first, as an install leaves them, like HTA's); the median of --repeats runs is reported for llmdiag and of --baseline-repeats runs for orjson and
HTA (long runs, whose noise averages out; 1 by default to keep `make bench` within minutes). Ratios come
from one run of this script. Results: a table on stdout and benchmarks/results/<timestamp>.json. Method: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

from benchmarks import generate
from benchmarks.proctree import run_sampled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "real")
MB = 1e6


@dataclass
class Case:
    name: str
    kind: str  # real | set | scaling | render | cost | imports | ladder | whole
    ranks: int = 0
    mb: float = 0.0
    hta: bool = True
    path: str = ""
    files: list = field(default_factory=list)


def cases_for(mode: str, real_dir: str) -> list[Case]:
    real = []
    for name, rel in [("real:sampled_pair", "hta/sampled_pair"), ("real:nccl_data", "hta/nccl_data.json.gz"),
                      ("real:a100_16rank", "hta/a100_16rank_alltoall_rank0.json.gz"),
                      ("real:ns_resolution", "hta/ns_resolution_rank-0.pt.trace.json.gz")]:
        p = os.path.join(real_dir, rel)
        if os.path.exists(p) and (mode != "quick" or name in ("real:sampled_pair", "real:nccl_data")):
            files = sorted(glob.glob(os.path.join(p, "*.json.gz"))) if os.path.isdir(p) else [p]
            real.append(Case(name, "real", len(files), path=p, files=files))
    sizes = {  # (ranks, MB per rank, HTA too): default and full are the sizes; full repeats more
        "quick": [(4, 5, True), (1, 50, True)],
        "default": [(8, 100, True), (64, 20, True), (1, 1000, True)],
        "full": [(8, 100, True), (64, 20, True), (1, 1000, True)],
    }[mode]
    sets = [Case(f"r{r}x{m:g}", "set", r, m, h) for r, m, h in sizes]
    scale_mb = {"quick": 1, "default": 4, "full": 4}[mode]
    scale_ranks = {"quick": [4, 16], "default": [8, 32, 128, 256], "full": [8, 32, 128, 256]}[mode]
    scaling = [Case(f"scale:{r}x{scale_mb}", "scaling", r, scale_mb, False) for r in scale_ranks]
    n = 64 if mode == "quick" else 512
    render = [Case(f"render:{n}", "render", n, hta=False)]
    # benchmarks/render_cost.py: analyze with / without the report (not in --quick: it runs analyze 2x4 times)
    cost = [] if mode == "quick" else [Case("render_cost:1x35", "cost", 1, 35, hta=False)]
    control = os.path.join(real_dir, "hta", "trace_diff", "control.json.gz")  # the largest real HTA trace, 35 MB
    if mode != "quick" and os.path.exists(control):
        cost.append(Case("render_cost:real", "cost", 1, 35, hta=False, path=control))
    # benchmarks/whole_command.py: `analyze --json --report` as a process against gunzip + orjson of the same
    # bytes, on the real fixtures, in paired rounds (two small fixtures, one round, in --quick)
    whole = [Case("whole:real", "whole", hta=False, path=real_dir)] if real else []
    # benchmarks/import_cost.py: what `analyze` of one rank imports, against numpy's import (~10 s)
    imports = [Case("imports:1x0.2", "imports", 1, 0.2, hta=False)]
    return real + sets + scaling + render + cost + imports + whole


def ladder_cases(rungs: str | None) -> list[Case]:
    """Only on request (`--cases ladder`): its top rung generates and analyses 16,384 files."""
    from benchmarks import ladder

    ranks = [int(x) for x in rungs.split(",")] if rungs else list(ladder.RUNGS)
    return [Case(f"ladder:{r}", "ladder", r, ladder.MB_PER_RANK, hta=False) for r in ranks]


def measure(tool: str, spec: dict, repeats: int, timeout: float) -> dict:
    runs = []
    for _ in range(max(1, repeats)):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        done, mem = run_sampled([sys.executable, "-m", "benchmarks.child", tool, json.dumps(spec)], timeout, env)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if done.returncode != 0 or line is None:
            err = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return {"error": err[:300], **mem}
        runs.append({**json.loads(line[7:]), **mem})
    med = {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu")}
    peak = {k: max(r[k] for r in runs) for k in ("peak_rss", "peak_pss", "maxrss_self", "maxrss_children", "procs")}
    return {**runs[-1], **med, **peak, "runs": [round(r["wall"], 3) for r in runs]}


def decompressed_sizes(files: list[str]) -> list[int]:
    """Streamed, not held: this process's RSS is inherited by the children's ru_maxrss across exec."""
    from llmdiag.diagnose.io.stream import blocks

    return [sum(map(len, blocks(f))) for f in files]


def prepare(case: Case, data_dir: str) -> None:
    if case.kind in ("set", "scaling", "cost", "imports", "ladder") and not (case.kind == "cost" and case.path):
        case.path = os.path.join(data_dir, case.name.replace(":", "_"))
        t = time.perf_counter()
        case.files = generate.write_set(case.path, case.ranks, case.mb)
        print(f"  data {case.name}: {case.path} ({time.perf_counter() - t:.0f} s)", flush=True)


def render_summary(case: Case, src: Case, out_dir: str) -> None:
    """A summary of `case.ranks` ranks: the analysis of a small generated set, its ranks repeated."""
    import orjson

    from llmdiag.diagnose.analyze import analyze_path

    d = analyze_path(src.path, rules=False, exclude_last_step=True).to_dict()
    base = d["ranks"]
    d["ranks"] = [{**base[i % len(base)], "rank": i} for i in range(case.ranks)]
    d["world_size"] = case.ranks
    case.path = os.path.join(out_dir, f"summary-{case.ranks}.json")
    with open(case.path, "wb") as f:
        f.write(orjson.dumps(d, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))


def run_case(case: Case, a, results_dir: str) -> dict:
    row: dict = {"case": case.name, "kind": case.kind, "ranks": case.ranks}
    if case.kind == "cost":
        from benchmarks import render_cost

        try:
            row["cost"] = render_cost.measure(case.path, max(3, a.repeats))
        except RuntimeError as e:
            row["cost"] = {"error": str(e)}
        return row
    if case.kind == "whole":
        from benchmarks import whole_command

        names = ["sampled_pair", "nccl_data"] if a.quick else None
        try:
            row["whole"] = whole_command.measure(case.path, 1 if a.quick else max(5, a.repeats), names)
        except RuntimeError as e:
            row["whole"] = {"error": str(e)}
        return row
    if case.kind == "imports":
        from benchmarks import import_cost

        try:
            row["imports"] = import_cost.measure(case.files[0], 5 if a.quick else 15)
        except RuntimeError as e:
            row["imports"] = {"error": str(e)}
        return row
    if case.kind == "render":
        try:
            import llmdiag.reports.render  # noqa: F401
        except ImportError as e:
            return {**row, "note": f"reports/render.py not importable ({e})"}
        spec = {"summary": case.path, "out": os.path.join(results_dir, f"report-{case.ranks}.html")}
        row["render"] = measure("render", spec, a.repeats, a.timeout)
        return row
    sizes = decompressed_sizes(case.files)
    row.update(bytes=sum(sizes), largest=max(sizes), files=len(case.files))
    if case.kind == "ladder":
        from benchmarks import ladder

        spec = {"path": case.path, "out": case.path + "-out", "jobs": a.jobs}  # summary + report, kept to look at
        row["ladder"] = measure("ladder", spec, 1, a.timeout)
        ladder.clean(case.path)
        return row
    row["llmdiag"] = measure("llmdiag", {"path": case.path, "jobs": a.jobs}, a.repeats, a.timeout)
    if case.kind == "scaling":
        return row
    row["orjson"] = measure("orjson", {"files": case.files}, a.baseline_repeats, a.timeout)
    if a.hta and case.hta:
        spec = {"path": case.path} if os.path.isdir(case.path) else {"files": case.files}
        row["hta"] = measure("hta", spec, a.baseline_repeats, a.hta_timeout)
    else:
        why = "not run (--no-hta)" if not a.hta else "not run: too slow / too much memory at this size"
        row["hta"] = {"error": why}
    return row


def _r(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def floor_for(row: dict, floors: dict) -> float:
    """The idle tree matching how llmdiag ran this case: in-process, or with forked workers."""
    return floors.get("workers" if row["llmdiag"].get("procs", 1) > 1 else "inline") or 0.0


def table(rows: list[dict], floors: dict) -> str:
    head = ("| case | ranks | MB | llmdiag s | MB/s | orjson s | HTA s | vs HTA (wall) | vs HTA (cpu) | vs orjson (wall) "
            "| vs orjson (cpu) | peak PSS MB | × largest | × largest above idle | HTA peak MB | overlap % llmdiag / HTA |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if r["kind"] not in ("real", "set"):
            continue
        l, o, h = r["llmdiag"], r.get("orjson") or {}, r.get("hta") or {}
        if "error" in l:
            out.append(f"| {r['case']} | {r['ranks']} | {r['bytes'] / MB:.0f} | failed: {l['error']} |" + " |" * 12)
            continue
        vs_h = h["wall"] / l["wall"] if "wall" in h else None
        vs_hc = h["cpu"] / l["cpu"] if "cpu" in h else None
        vs_o = o["wall"] / l["wall"] if "wall" in o else None
        vs_oc = o["cpu"] / l["cpu"] if "cpu" in o else None
        peak = l["peak_pss"] / MB
        hta_s = _r(h.get("wall")) if "wall" in h else h.get("error", "-")[:70]
        out.append(f"| {r['case']} | {r['ranks']} | {r['bytes'] / MB:.0f} | {l['wall']:.2f} | {r['bytes'] / MB / l['wall']:.0f} "
                   f"| {_r(o.get('wall'))} | {hta_s} | {_r(vs_h, 1)} | {_r(vs_hc, 1)} | {_r(vs_o)} | {_r(vs_oc)} | {peak:.0f} "
                   f"| {peak * MB / r['largest']:.2f} | {(peak * MB - floor_for(r, floors)) / r['largest']:.2f} "
                   f"| {_r(h['peak_pss'] / MB, 0) if 'wall' in h else '-'} "
                   f"| {_r(l.get('overlap_pct'))} / {_r(h.get('overlap_pct'))} |")
    scale = [r for r in rows if r["kind"] == "scaling" and "wall" in r["llmdiag"]]
    if scale:
        out += ["", "| scaling | ranks | MB | llmdiag s | s per GB | peak PSS MB |", "|---|---|---|---|---|---|"]
        for r in scale:
            l = r["llmdiag"]
            out.append(f"| {r['case']} | {r['ranks']} | {r['bytes'] / MB:.0f} | {l['wall']:.2f} "
                       f"| {l['wall'] / (r['bytes'] / 1e9):.1f} | {l['peak_pss'] / MB:.0f} |")
    if any(r["kind"] == "ladder" for r in rows):
        from benchmarks import ladder

        out += ["", ladder.table([r for r in rows if r["kind"] == "ladder"])]
    for r in rows:
        if r["kind"] == "render":
            m = r.get("render") or {}
            out.append("\n" + (r.get("note") or (f"render_report, {r['ranks']} ranks: failed: {m['error']}" if "error" in m
                       else f"render_report, {m['ranks']} ranks: {m['wall']:.2f} s, {m['bytes_out'] / MB:.1f} MB of "
                            f"HTML, peak {m['peak_pss'] / MB:.0f} MB PSS; summary read back (from_dict) "
                            f"{m['from_dict_vs_loads']:.1f}x orjson.loads, written (to_dict) "
                            f"{m['to_dict_vs_loads_dumps']:.1f}x orjson loads+dumps")))
    for r in rows:
        if r["kind"] == "cost":
            from benchmarks import render_cost

            what = "HTA's trace_diff/control (35 MB, real)" if r["case"].endswith(":real") else ""
            out.append("\n" + render_cost.line(r["cost"], r.get("mb") or 35, what))
    for r in rows:
        if r["kind"] == "whole":
            from benchmarks import whole_command

            out.append("\n" + whole_command.line(r["whole"]))
    for r in rows:
        if r["kind"] == "imports":
            from benchmarks import import_cost

            out.append("\n" + import_cost.line(r["imports"]))
    if floors.get("inline"):
        out.append(f"\nidle tree (interpreter and analysis modules loaded): {floors['inline'] / MB:.0f} MB PSS in-process, "
                   f"{(floors.get('workers') or 0) / MB:.0f} MB PSS with the forked workers")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="llmdiag analyzer benchmarks (docs/benchmarks.md)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="smoke sizes (about a minute)")
    g.add_argument("--full", action="store_true", help="default sizes, baselines repeated 3 times (~20 minutes)")
    ap.add_argument("--cases", help="comma-separated case names or prefixes (real, r8, scale, render, ...)")
    ap.add_argument("--ladder", metavar="RANKS", help="ladder rungs, e.g. 64,1024 (default 64..16384)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per llmdiag measurement (median)")
    ap.add_argument("--baseline-repeats", type=int, help="runs per orjson and HTA measurement (median; "
                    "default 1, 3 with --full)")
    ap.add_argument("--no-hta", dest="hta", action="store_false", help="skip HolisticTraceAnalysis")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="llmdiag worker processes")
    ap.add_argument("--parser", choices=["auto", "orjson"], default="auto",
                    help="llmdiag's JSON decoder: msgspec where installed (auto), or force orjson")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    ap.add_argument("--real-dir", default=REAL)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per llmdiag/orjson run")
    ap.add_argument("--hta-timeout", type=float, default=900, help="seconds per HTA run")
    a = ap.parse_args(argv)
    mode = "quick" if a.quick else "full" if a.full else "default"
    if a.quick:
        a.repeats = min(a.repeats, 1)
    if a.baseline_repeats is None:
        a.baseline_repeats = 3 if a.full else 1
    if a.hta:
        try:
            import hta  # noqa: F401
        except ImportError:
            print("HolisticTraceAnalysis is not installed: HTA columns are skipped (pip install HolisticTraceAnalysis)")
            a.hta = False
    byte_compile()
    cases = cases_for(mode, a.real_dir)
    if a.cases:
        want = a.cases.split(",")
        cases = [c for c in cases if any(c.name.startswith(w) for w in want)]
        cases += ladder_cases(a.ladder) if "ladder" in want else []
    os.makedirs(a.out, exist_ok=True)
    if a.parser == "orjson":
        os.environ["LLMDIAG_PARSER"] = "orjson"  # inherited by every child
    from llmdiag.diagnose.io import fastjson

    parser = "msgspec" if fastjson.decoder() else "orjson (pip install msgspec for the typed decoder)"
    print(f"mode {mode}: {len(cases)} cases, jobs {a.jobs}, repeats {a.repeats} (baselines {a.baseline_repeats}), "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, llmdiag parser {parser}", flush=True)
    rows, t_all = [], time.perf_counter()
    for c in cases:
        prepare(c, a.data_dir)
    floors = idle_floors(a)
    small = next((c for c in cases if c.kind == "scaling"), None) or next((c for c in cases if c.kind == "set"), None)
    for c in cases:
        if c.kind == "render":
            if small is None:
                prepare(small := Case("scale:4x1", "scaling", 4, 1), a.data_dir)
            render_summary(c, small, a.out)
    for c in cases:
        t = time.perf_counter()
        print(f"  {c.name} ...", end="", flush=True)
        rows.append(run_case(c, a, a.out))
        print(f" {time.perf_counter() - t:.0f} s", flush=True)
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "mode": mode, "machine": machine(), "jobs": a.jobs,
              "parser": parser.split()[0], "load_avg_at_end": os.getloadavg(),
              "repeats": a.repeats, "baseline_repeats": a.baseline_repeats, "idle_tree_pss": floors, "rows": rows,
              "seconds": time.perf_counter() - t_all}
    path = os.path.join(a.out, time.strftime("%Y%m%d-%H%M%S") + f"-{mode}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print()
    print(table(rows, floors))
    print(f"\n{time.perf_counter() - t_all:.0f} s in all; results: {path}")


def byte_compile() -> None:
    """llmdiag's modules compiled to bytecode before anything is timed, as an installed package is (pip
    compiles on install; HTA's modules come compiled): otherwise, under PYTHONDONTWRITEBYTECODE or in a
    fresh checkout, every module analyze_path imports lazily is compiled from source inside llmdiag's timer
    (~50 ms, more than a small trace's whole analysis). Writes only __pycache__/ beside the sources."""
    import compileall
    import subprocess

    for pkg in ("diagnose", "reports", "benchmarks"):
        if os.path.isdir(os.path.join(ROOT, pkg)):
            compileall.compile_dir(os.path.join(ROOT, pkg), quiet=2)
    # the dataclasses' generated __init__ code, kept beside the bytecode as a first run would (model/dc.py)
    code = ("import llmdiag.diagnose.cli.analyze, llmdiag.diagnose.analyze, llmdiag.diagnose.rules, "
            "llmdiag.reports.render\nfrom llmdiag.diagnose.model.dc import write_init_cache\nwrite_init_cache()")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=False, capture_output=True)


def idle_floors(a) -> dict:
    """Peak PSS of the tree before any trace counts: in-process, and with `jobs` forked workers, each with the
    analysis modules loaded (benchmarks/child.py `idle`). Small cases are read against these."""
    path = generate.write_set(os.path.join(a.data_dir, "idle"), 1, 0.01)[0]
    return {name: measure("idle", {"path": path, "jobs": jobs}, 1, a.timeout).get("peak_pss")
            for name, jobs in (("inline", 1), ("workers", a.jobs))}


def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "cores": os.cpu_count(),
            "load_avg_at_start": os.getloadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    for mod in ("numpy", "orjson", "pandas", "hta"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # optional
            pass
    return info


if __name__ == "__main__":
    main()
