"""HTA's sampled pair (ranks 0 and 1 of a 128-rank job, event-sampled: each rank kept 10 SendRecv kernels, not
the same ones): only collectives both ranks recorded are matched, found here from the events (kernels ending
within 1 ms of each other on the two ranks), and the order of the rest pairs nothing. HTA names rank 1 the
straggler from two of 128 ranks; llmdiag names none: one rank against one has no median of peers (compute),
and with two ranks one of them is always last (arrivals)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from llmdiag.diagnose.analyze import analyze_path

PAIR = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "real" / "hta" / "sampled_pair"
pytestmark = pytest.mark.real(PAIR)


def _kernels():
    out = {}
    for f in sorted(PAIR.glob("*.json.gz")):
        with gzip.open(f) as fh:
            d = json.load(fh)
        out[d["distributedInfo"]["rank"]] = [(e["ts"], e["ts"] + e["dur"]) for e in d["traceEvents"]
                                             if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
    return out


def test_sampled_pair_matches_only_collectives_both_ranks_recorded():
    k = _kernels()
    pairs = [(s0, min(k[1], key=lambda x: abs(x[1] - e0))[0]) for s0, e0 in k[0]
             if min(abs(e1 - e0) for _, e1 in k[1]) < 1000]
    skews = sorted(abs(a - b) / 1e3 for a, b in pairs)
    a = analyze_path(str(PAIR), jobs=1)
    sk = a.skew
    assert sk.matched == len(pairs) and sk.by_order == 0
    assert max(b.max_skew_ms for b in sk.by_collective) == pytest.approx(skews[-1], abs=0.01)
    assert sorted(round(x.skew_ms, 1) for x in sk.late) == sorted(round(x, 1) for x in skews)
    assert sk.stragglers == [] and "stragglers" not in {f.id for f in a.findings}
