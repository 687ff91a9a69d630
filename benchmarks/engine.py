"""The Dask engine against the local pool, in one run: the same generated set analysed by both, alternately,
the summaries compared (provenance aside) and Dask's wall time given as a ratio of the pool's.

    python -m benchmarks.engine --ranks 1024 --mb 0.5 --workers 2 [--rules] [--repeats 3]

`--workers` is both the pool's processes and the LocalCluster's (`--dask-local N`); Dask's time includes
starting and closing its cluster, as a user of `--dask-local` pays it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import orjson

from benchmarks.generate import write_set
from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.engine import EngineSpec


def _summary(a) -> bytes:
    d = a.to_dict()
    d.pop("provenance", None)
    return orjson.dumps(d, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--mb", type=float, default=0.5)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--rules", action="store_true", help="run the rules too (both engines)")
    ap.add_argument("--out", default=None, help="folder of the generated set (default benchmarks/data/...)")
    a = ap.parse_args(argv)
    d = a.out or os.path.join("benchmarks", "data", f"engine-r{a.ranks}x{a.mb:g}")
    write_set(d, a.ranks, a.mb)
    engines = {"pool": EngineSpec(jobs=a.workers), "dask": EngineSpec(dask_local=a.workers)}
    wall: dict[str, list[float]] = {k: [] for k in engines}
    phase: dict[str, list[dict]] = {k: [] for k in engines}
    summaries: dict[str, bytes] = {}
    for _ in range(a.repeats):
        for name, spec in engines.items():  # alternated: load on the shared machine hits both alike
            t: dict = {}
            t0 = time.perf_counter()
            res = analyze_path(d, engine=spec, rules=a.rules, timings=t)
            wall[name].append(time.perf_counter() - t0)
            phase[name].append(t)
            summaries[name] = _summary(res)
            del res
    same = summaries["pool"] == summaries["dask"]
    print(f"{a.ranks} ranks x {a.mb:g} MB, {a.workers} workers, rules {'on' if a.rules else 'off'}, "
          f"{a.repeats} repeat(s), load average {os.getloadavg()[0]:.1f}")
    for name in engines:
        m = statistics.median(wall[name])
        mp = statistics.median(t["map"] for t in phase[name])
        print(f"  {name:5s} wall {m:7.2f} s (map {mp:6.2f} s)  runs: {', '.join(f'{x:.2f}' for x in wall[name])}")
    print(f"  dask / pool wall: {statistics.median(wall['dask']) / statistics.median(wall['pool']):.2f}x; "
          f"summary identical (provenance aside): {same} ({len(summaries['pool']) / 1e6:.1f} MB)")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
