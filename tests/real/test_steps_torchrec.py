"""The TorchRec DLRM traces (V100, 4 ranks, ProfilerStep#4-6): each step over ranks, the outlier step and
where the allocator time lies, checked against the events themselves.

The truth is computed here from the gzip'd JSON, independently of llmdiag: a step's device window is the
first to the last kernel/copy/set whose launch (cuda_runtime, same correlation) lies in the host
ProfilerStep span, clipped where the next step's window begins (the last: where the next would begin, its
own end less the earlier steps' median carry into the next window, not before its host end plus the delay of
its device start; docs/metrics.md "Analysis window"); the allocator time of a step is the
cudaMalloc + cudaFree time that starts in its host span. What is tested holds for every folder: the
per-step medians, the steps over 1.5x the median step, and that the allocator time concentrates in the
outlier step where it concentrates at all (in sst_sleep_pl_dense_after_backward_2 it does not, and no step
is an outlier: the silent twin).
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from llmdiag.diagnose.model.steps import concentrated

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real" / "torchrec"
FOLDERS = ["sst_long_a2a_optimizer_3", "sst_long_a2a_optimizer_5", "sst_long_a2a_optimizer_5_qcomm",
           "sst_sleep_pl_dense_after_backward_2"]
pytestmark = pytest.mark.real(REAL)


def truth(path: str) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """(step -> device window ms, step -> allocator ms, step -> device idle ms) of one rank's trace, from its
    events."""
    with gzip.open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in ev
                   if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")
    step_of: dict[int, int] = {}
    for e in ev:
        c = (e.get("args") or {}).get("correlation")
        if e.get("cat") == "cuda_runtime" and c is not None:
            n = next((n for s, t, n in steps if s <= e["ts"] <= t), None)
            if n is not None:
                step_of[c] = n
    dev: dict[int, list] = {}
    for e in ev:
        n = step_of.get((e.get("args") or {}).get("correlation")) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else None
        if n is not None:
            w = dev.setdefault(n, [e["ts"], e["ts"] + e["dur"]])
            w[0], w[1] = min(w[0], e["ts"]), max(w[1], e["ts"] + e["dur"])
    wins = [dev[n] for _, _, n in steps]
    carry = []
    for a, b in zip(wins, wins[1:]):
        carry.append(a[1] - b[0] if a[1] > b[0] > a[0] else 0)
        a[1] -= carry[-1]
    if any(carry):  # the last ends where the next would begin: less the earlier steps' median carry, not before
        (hs, he, _), w = steps[-1], wins[-1]  # its host end + the delay of its device start
        w[1] = min(w[1], max(w[1] - statistics.median(carry), he + max(w[0] - hs, 0)))
    alloc = {n: sum(e["dur"] for e in ev if e.get("name") in ("cudaMalloc", "cudaFree") and s <= e["ts"] < t) / 1e3
             for s, t, n in steps}
    busy = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    idle = {}
    for (_, _, n), (a, b) in zip(steps, wins):  # the window minus the union of device work inside it
        covered, end = 0.0, a
        for s, t in busy:
            s, t = max(s, end), min(t, b)
            if t > s:
                covered, end = covered + t - s, t
        idle[n] = (b - a - covered) / 1e3
    return {n: (w[1] - w[0]) / 1e3 for (_, _, n), w in zip(steps, wins)}, alloc, idle


@pytest.fixture(scope="module")
def analysed():
    from llmdiag.diagnose.analyze import analyze_runs

    return {name: analyze_runs(str(REAL / name), jobs=2, run="all", rules=False) for name in FOLDERS}


@pytest.mark.parametrize("name", FOLDERS)
def test_steps_match_the_events(analysed, name):
    for a in analysed[name]:
        per_rank = [truth(r.file) for r in a.ranks]
        steps = sorted({n for w, _, _ in per_rank for n in w})
        want = {n: statistics.median(w[n] for w, _, _ in per_rank if n in w) for n in steps}
        idle = {n: statistics.median(i[n] for _, _, i in per_rank if n in i) for n in steps}
        assert [s.step for s in a.steps.steps] == steps
        for s in a.steps.steps:
            assert s.time_ms == pytest.approx(want[s.step], abs=0.002), (name, s.step)
            assert s.time_max_ms == pytest.approx(max(w[s.step] for w, _, _ in per_rank), abs=0.002)
            assert s.idle_ms == pytest.approx(idle[s.step], abs=0.002), (name, s.step)
        med = statistics.median(want.values())
        flagged = [n for n in steps if want[n] > 1.5 * med]
        assert a.steps.outliers == flagged
        named = [i.message for i in a.issues if " took " in i.message and i.message.startswith("step ")]
        assert [int(m.split()[1]) for m in named] == flagged
        alloc = {n: sum(al.get(n, 0.0) for _, al, _ in per_rank) for n in steps}
        c = concentrated(alloc)
        if c is not None:  # the allocator's time lies in one step: the step that is the outlier, its GPU idle
            assert flagged == [c.step], (name, alloc)
            excess, idle_more = want[c.step] - med, idle[c.step] - statistics.median(idle.values())
            assert idle_more > 0.5 * excess and "most of the excess is idle" in named[0]
        else:
            assert flagged == [], (name, alloc)


def test_the_folders_say_what_an_expert_reads_in_them(analysed):
    """What the events show (numbers from `truth`): the first profiled step (#4) carries most of the
    cudaMalloc/cudaFree time and is the outlier in the optimizer_3/_5 folders, step 5 in both qcomm runs; the
    sleep folder's steps are within 11 % of each other."""
    assert [a.steps.outliers for a in analysed["sst_long_a2a_optimizer_3"]] == [[4]]
    assert [a.steps.outliers for a in analysed["sst_long_a2a_optimizer_5"]] == [[4]]
    assert [a.steps.outliers for a in analysed["sst_long_a2a_optimizer_5_qcomm"]] == [[5], [5]]
    assert [a.steps.outliers for a in analysed["sst_sleep_pl_dense_after_backward_2"]] == [[]]
