"""Why `--cross-check hta` is 1.59 points off on TorchRec sst_long_a2a_optimizer_3 rank 1 (issue 36), shown
from the raw events with json + gzip here: HTA's definition computed by hand reproduces HTA 0.5.0's 38.72 %;
the same device events restricted to llmdiag's step windows reproduce llmdiag's 40.31 %. The whole gap is which
kernels each counts at the dropped last step's edge (docs/metrics.md, "Overlap, and how it differs from HTA"):
HTA keeps the NCCL kernels launched before the last ProfilerStep that run after the next step's first kernel."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path
from llmdiag.diagnose.cli.hta_check import _far_apart
from tests.gen.plain import union

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real" / "torchrec"
OPT3 = REAL / "sst_long_a2a_optimizer_3"



def _overlap_pct(events, lo=-1e300, hi=1e300) -> float:
    """|U(nccl) ∩ U(other non-memory kernels)| / |U(nccl)| over the events, clipped to [lo, hi)."""
    def clip(kind):
        return union([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in events if _kind(e["name"]) == kind
                       and e["ts"] < hi and e["ts"] + e["dur"] > lo])
    comm, comp = clip("comm"), clip("comp")
    both = sum(max(0.0, min(a[1], b[1]) - max(a[0], b[0])) for a in comm for b in comp)
    return 100 * both / sum(b - a for a, b in comm)


def _kind(name: str) -> str:
    return "comm" if "nccl" in name.lower() else "mem" if name.startswith(("Memcpy", "Memset")) else "comp"


@pytest.mark.real(OPT3)
def test_the_gap_is_launch_versus_run_attribution(tmp_path):
    (f,) = OPT3.glob("*_29221.*.json.gz")
    with gzip.open(f) as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and "dur" in e]

    def arg(e, k):
        v = (e.get("args") or {}).get(k)
        return v if isinstance(v, int) else -1

    device = [e for e in ev if arg(e, "stream") >= 0]
    host = [e for e in ev if not (arg(e, "stream") >= 0 and arg(e, "correlation") >= 0)]
    cut = max(e["ts"] for e in host if "ProfilerStep" in e["name"])  # HTA drops the last step on load
    launched = {arg(e, "correlation") for e in host if e["ts"] < cut}
    hta_set = [e for e in device if arg(e, "correlation") in launched]
    assert _overlap_pct(hta_set) == pytest.approx(38.72, abs=0.005)  # HTA 0.5.0's own number (fixtures README)

    (tmp_path / f.name).symlink_to(f)
    a = analyze_path(str(tmp_path), jobs=1, rules=False, exclude_last_step=True)
    (r,) = a.ranks
    lo = r.origin_us + r.steps[0].start_ms * 1e3
    hi = r.origin_us + (r.steps[-1].start_ms + r.steps[-1].time_ms) * 1e3
    assert 100 * r.overlap_ratio == pytest.approx(_overlap_pct(device, lo, hi), abs=0.01)  # llmdiag's 40.31
    assert 100 * r.overlap_ratio - 38.72 == pytest.approx(1.59, abs=0.01)
    late = sum(e["dur"] for e in hta_set if _kind(e["name"]) == "comm" and e["ts"] + e["dur"] > hi) / 1e3
    assert late > 30  # ms of NCCL kernels HTA counts after llmdiag's last window ends (36.8)


def test_cross_check_names_ranks_over_a_point():
    note = _far_apart({0: 41.09, 1: 38.72, 2: 20.65}, {0: 0.4187, 1: 0.4031, 2: 0.2064})
    assert "rank(s) 1:" in note and "0" not in note.split("rank(s)")[1].split(":")[0]
    assert _far_apart({0: 14.31}, {0: 0.1476}) == ""
