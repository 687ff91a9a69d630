"""The pipeline what-if for microbatches on llmdiag's own pp2 CPU runs: the m = 2 run's prediction of the
m = 8 step (same global batch) against the measured m = 8 run.

What one pair shows reliably is asserted: the fitted model replayed at each run's own setting lands within
15 % of its measured window, and the fitted fixed costs and messages put the m = 8 prediction above m/m′
scaling alone. The cross-run error is printed, not asserted: over 32 pairs it was −52 to +26 %, within
10 % in 15 of the 20 pairs run on a quiet machine (6 of them consecutive) and in 3 of 12 under other jobs'
load (docs/simulation.md, "Measured: m = 2 → m = 8"), and a run of this test put it more than 11 % over
where m/m′ scaling alone was 11 % under (a slow m = 2 run): no bound on it would hold without flaking.

`python -m tests.e2e.test_whatif_microbatches N OUT [alternate]` runs N pairs and prints the table of
docs/simulation.md (`alternate`: odd pairs run m = 8 first).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.simulate.replay import predict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = ("--hidden", "256", "--seq-len", "128", "--batch", "16", "--profile-steps", "1,1,5")
# The model replaying its own run: −4.7 to +10.2 % over 40 runs (docs/simulation.md); what is left is host time
# between actions the model does not place (the optimizer window edges, noise on shared cores).
SELF_TOLERANCE = 0.15


def run(out: str, m: int) -> str:
    cmd = [sys.executable, "-m", "llmdiag.diagnose.cli.main", "run", "--workload", "pp2", "--microbatches", str(m),
           "--out", out, *MODEL]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return out


def optimizer_ms(run_dir: str) -> float:
    """Median `llmdiag/optimizer` span over the ranks' profiled steps: the machine's speed during the run."""
    d = []
    for f in sorted(os.listdir(os.path.join(run_dir, "traces"))):
        with gzip.open(os.path.join(run_dir, "traces", f)) as fh:
            d += [e["dur"] / 1e3 for e in json.load(fh)["traceEvents"] if e.get("name") == "llmdiag/optimizer"]
    assert d, f"{run_dir}: no llmdiag/optimizer spans"
    return float(np.median(d))


def pair(m2_dir: str, m8_dir: str) -> dict:
    full = analyze_path(m2_dir, rules=False, jobs=1)
    a2, a8 = full.pipeline, analyze_path(m8_dir, rules=False, jobs=1).pipeline
    assert a2 is not None and a8 is not None and (a2.microbatches, a8.microbatches) == (2, 8)
    q = {(x.schedule, x.microbatches): x for x in a2.predictions}[(a2.schedule, 8)]
    speed = optimizer_ms(m8_dir) / optimizer_ms(m2_dir)
    return {"predicted": q.step_ms, "measured": a8.window_ms, "error": q.step_ms / a8.window_ms - 1,
            "speed": speed, "held": q.step_ms * speed / a8.window_ms - 1, "self2": a2.prediction_error,
            "self8": a8.prediction_error, "model": a2.prediction_model, "naive": _scaled(full, a2.schedule, 8)}


def _scaled(a, schedule: str, m2: int) -> float:
    """The m2 step replayed the way predictions were made before the cost model: each action's whole cost
    scaled by m/m2, free communication."""
    cost: dict = {}
    for r in a.ranks:
        for x in r.pipeline_actions:
            k = (x.stage, "B" if x.kind in ("B", "I", "W") else "F")
            cost[k] = cost.get(k, 0.0) + (x.end_ms - x.start_ms) / r.nsteps / m2
    return predict(schedule, 2, m2, cost).makespan


def line(k, r) -> str:
    return (f"pair {k}: predicted {r['predicted']:.1f} ms, measured {r['measured']:.1f} ms, error {r['error']:+.1%}; "
            f"machine {r['speed']:.2f}x slower in the m=8 run, error at equal speed {r['held']:+.1%}; "
            f"own-run replay m=2 {r['self2']:+.1%}, m=8 {r['self8']:+.1%}; m/m' scaling alone {r['naive']:.1f} ms "
            f"({r['naive'] / r['measured'] - 1:+.1%}, at equal speed {r['naive'] * r['speed'] / r['measured'] - 1:+.1%})")


@pytest.mark.slow
def test_m2_prediction_of_m8_fits_its_runs_and_beats_scaling_alone(tmp_path):
    r = pair(run(str(tmp_path / "m2"), 2), run(str(tmp_path / "m8"), 8))
    print(line(1, r))
    assert abs(r["self2"]) < SELF_TOLERANCE and abs(r["self8"]) < SELF_TOLERANCE, r
    # the fitted fixed costs and messages only add to the scaled cost: the prediction is above m/m' scaling
    assert r["predicted"] > r["naive"], r


if __name__ == "__main__":
    n, base = int(sys.argv[1]), sys.argv[2]
    alternate = sys.argv[3:] == ["alternate"]  # odd pairs run m = 8 first: a drift in machine speed shows as a sign flip
    for k in range(1, n + 1):
        d2, d8 = os.path.join(base, f"p{k}m2"), os.path.join(base, f"p{k}m8")
        for d, m in ([(d8, 8), (d2, 2)] if alternate and k % 2 else [(d2, 2), (d8, 8)]):
            run(d, m)
        r = pair(d2, d8)
        print(line(k, r) + ("; m=8 ran first" if alternate and k % 2 else ""), flush=True)
    print(r["model"])
