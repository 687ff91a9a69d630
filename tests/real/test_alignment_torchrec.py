"""The TorchRec DLRM captures (4 ranks, V100; ../shared/fixtures/real/torchrec), checked against their own
events read here with gzip + json: NCCL kernels of the ranks paired by completion (a kernel ends within 1 ms
on every rank), the rank whose capture lacks leading all-reduces or all_to_alls, all-reduce arrival skew, and which rank is
last. One run per folder (the qcomm folder holds two: each is checked alone)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from llmdiag.diagnose.analyze import analyze_path

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "real" / "torchrec"
pytestmark = pytest.mark.real(REAL)
QCOMM = "sst_long_a2a_optimizer_5_qcomm"
RUNS = {"opt3": ("sst_long_a2a_optimizer_3", None), "opt5": ("sst_long_a2a_optimizer_5", None),
        "sleep": ("sst_sleep_pl_dense_after_backward_2", None), "qcomm_a": (QCOMM, "_5410"), "qcomm_b": (QCOMM, "_559")}


def _files(run):
    folder, tag = RUNS[run]
    return sorted(p for p in (REAL / folder).glob("*.json.gz") if tag is None or tag in p.name)


def _allreduces(files, kind="AllReduce"):
    out = {}
    for f in files:
        with gzip.open(f) as fh:
            d = json.load(fh)
        k = sorted((e["ts"], e["ts"] + e["dur"]) for e in d["traceEvents"]
                   if e.get("cat") == "kernel" and kind in e.get("name", ""))
        out[d["distributedInfo"]["rank"]] = np.array(k, float).reshape(-1, 2) * 1e3  # ns
    return out


def _lead(kernels):
    """rank -> kernels the fullest rank completed more than 1 ms before this rank's first (of one kind)."""
    if not all(len(v) for v in kernels.values()):
        return {}
    ref = max(kernels, key=lambda r: (len(kernels[r]), -r))
    return {r: int((kernels[ref][:, 1] < v[0, 1] - 1e6).sum()) for r, v in kernels.items()}


def _truth(files, ends=None):
    """(rank -> all-reduces others recorded before its first, all-reduce skews, rank -> times alone last). The
    skews are over the all-reduces that start before `ends[rank]` (ns, trace clock): the end of the rank's
    analysed time, which leaves out the last step's carry into the next step (docs/metrics.md, the last step)."""
    ar = _allreduces(files)
    # leading collectives a rank lacks, all-reduces and all_to_alls (SendRecv kernels) alike: a kernel whose
    # launch preceded the capture (no runtime call with its correlation) is a collective like any other
    by_ar, by_a2a = _lead(ar), _lead(_allreduces(files, "SendRecv"))
    lead = {r: by_ar.get(r, 0) + by_a2a.get(r, 0) for r in ar}
    if not all(len(v) for v in ar.values()):  # no all-reduce (the sleep run): no all-reduce skew to check
        return {r: n for r, n in lead.items() if n}, np.zeros(0), {}
    if ends:
        ar = {r: v[v[:, 0] < ends[r]] for r, v in ar.items()}
    ref = max(ar, key=lambda r: (len(ar[r]), -r))
    skews, last = [], {}
    for s, e in ar[ref]:
        starts = {ref: s}
        for r, v in ar.items():
            j = int(np.argmin(np.abs(v[:, 1] - e)))
            if r != ref and abs(v[j, 1] - e) < 1e6:
                starts[r] = v[j, 0]
        if len(starts) < len(ar):
            continue
        vals = sorted(starts.values())
        skews.append(vals[-1] - vals[0])
        if vals[-1] > vals[-2]:
            top = max(starts, key=starts.get)
            last[top] = last.get(top, 0) + 1
    return {r: n for r, n in lead.items() if n}, np.array(skews) / 1e6, last


@pytest.mark.parametrize("run", list(RUNS))
def test_real_late_captures_and_straggler(run, tmp_path):
    files = _files(run)
    for f in files:
        (tmp_path / f.name).symlink_to(f)
    a = analyze_path(str(tmp_path), jobs=1)
    ends = {r.rank: r.origin_us * 1e3 + (r.steps[-1].start_ms + r.steps[-1].time_ms) * 1e6 for r in a.ranks}
    lead, skews, last = _truth(files, ends)
    sk = a.skew
    assert {w.rank: w.lead_n for w in sk.capture_windows if w.lead_n} == lead
    longest = max(st.time_ms for r in a.ranks for st in r.steps)
    assert all(b.max_skew_ms < longest for b in sk.by_collective)
    if len(skews):
        (b,) = [b for b in sk.by_collective if b.kind == "allreduce"]
        assert b.matched == len(skews)
        assert b.mean_skew_ms == pytest.approx(skews.mean(), rel=0.10)
    (x,) = [s for s in sk.stragglers if s.kind]
    assert x.rank == 2 and max(last, key=last.get) == 2 if last else x.rank == 2
    assert 0 < x.imposed_ms < a.step_ms and x.gain_kind == "simulated"
    f = next(f for f in a.findings if f.id == "stragglers")
    assert f"imposing {x.imposed_ms:.2f} ms of waiting per step" in f.evidence.text.replace(",", "")
    assert "uneven work" not in f.action  # rank 2 computes no more than its peers in any of these runs
    # one text, one set of numbers everywhere: terminal, report, JSON summary, finding
    from markupsafe import escape

    from llmdiag.diagnose.cli.terminal import render
    from llmdiag.diagnose.model.analysis import Analysis
    from llmdiag.reports.render import render_html

    assert x.reason in f.evidence.text and x.reason in " ".join(render(a).split())
    assert str(escape(x.reason)) in " ".join(render_html(a).split())
    back = Analysis.from_dict(a.to_dict())
    assert [(s.rank, s.reason, s.imposed_ms, s.gain_ms) for s in back.skew.stragglers] == \
        [(s.rank, s.reason, s.imposed_ms, s.gain_ms) for s in sk.stragglers]
    assert not any(g.id == "exposed_comm" and "async_op" in g.action for g in a.findings)
