"""Warnings as an attack on the reader (issue 35, low: "the runs warning lists 10,000 runs on one line",
"`--run all` output is quadratic in runs"; the outlier-step warnings are in test_adv_steps.py).

Before: the runs warning named every run (10,000 parts on one line, repeated once per run analysed by
`--run all`: quadratic output), and telling whether two runs share a process compared every pair of runs.
Now it names at most 8 runs (the two oldest, the analysed one, the newest) and counts the rest, and the shared
process check is one pass."""

from __future__ import annotations

import time
from types import SimpleNamespace

from llmdiag.diagnose.metrics.job.runs import SHOWN_RUNS, runs_message
from llmdiag.diagnose.model.runs import RunInfo
from tests.adversarial.conftest import attack, check
from tests.gen.builder import gpu_rank


def _runs(n: int, chosen: int):
    runs = [[SimpleNamespace(error=None, world_size=1, rank=0, distributed={"rank": 0}, metrics=None,
                             path=f"/x/host_{100 + k}.{1_700_000_000_000_000_000 + k * 10**12}.pt.trace.json")]
            for k in range(n)]
    infos = [RunInfo(k + 1, 1, [0], 1, "2023-11-02 20:59:27 UTC", None, None, [100 + k], k == chosen) for k in range(n)]
    return infos, runs


def test_the_runs_warning_is_bounded_in_runs():
    for chosen in (9_999, 4_321, 0):
        infos, runs = _runs(10_000, chosen)
        t0 = time.perf_counter()
        m = runs_message(infos, runs)
        assert time.perf_counter() - t0 < 2.0
        assert len(m) < 1500 and m.count("run ") <= SHOWN_RUNS + 4, m
        assert f"run {chosen + 1}:" in m and "run 10000:" in m and "more runs" in m
        hidden = sum(int(x.split()[1]) for x in m.split("; ") if x.startswith("… "))
        assert hidden + sum(1 for x in m.split("; ") if "1 file" in x) == 10_000  # every run named or counted


def test_run_all_writes_one_bounded_line_per_run(tmp_path):
    """Ten runs of one 2-rank job (the same script run again): `--run all` writes one line per run analysed,
    each naming at most SHOWN_RUNS runs (every run on every line before)."""
    import re

    import orjson

    d = tmp_path / "runs"
    for k in range(10):
        for r in (0, 1):
            b = gpu_rank(r, world_size=2)
            doc = b.to_dict()
            doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000 + k * 3_600 * 10**9
            (d / f"k{k}").mkdir(parents=True, exist_ok=True)
            (d / f"k{k}" / f"rank{r}.json").write_bytes(orjson.dumps(doc))
    r = attack("analyze", d, "-q", "--no-report", "--run", "all", "--json", tmp_path / "s.json", cwd=tmp_path)
    check(r, 0, one_line=False)
    lines = [x for x in r.lines if "the input holds 10 runs" in x]
    assert len(lines) == 10 and all(len(re.findall(r"run \d+: ", x)) <= SHOWN_RUNS for x in lines), lines[0]
