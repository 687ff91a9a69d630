"""The hand-over at the end of loss.backward() on a real trace, against the events read with plain gzip/json.

hta nccl_data (DDP ResNet-50, A100, host slow): the main thread is silent inside each `## backward ##` while the
autograd thread (the one running `autograd::engine::evaluate_function` ops) runs the backward and DDP's
copy_bucket_to_grad; the main thread's next op comes 1.50-1.67 ms after the autograd thread's last point, past the
1 ms tolerance (resume.HANDOFF_TOL_NS). Before resume.backward_handoff the walk took no hand-over there: it read
17.2 / 16.2 ms of host gap after the last all-reduce in steps 4 and 5 (ahead.py's return to the device), and the whole
backward, 106.9 ms, as one host gap in step 6. Now each step's path holds exactly the hand-over: a host gap from the
autograd thread's last point to the main thread's resume, and no host gap longer than it.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from llmdiag.diagnose.metrics.rank.per_rank import RankJob, run_job

REAL = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "real").resolve()
NCCL = "hta/nccl_data.json.gz"
HOST_CATS = ("cpu_op", "cuda_runtime")


def _handovers(rel: str) -> list[tuple[int, int]]:
    """Per `## backward ##`: (the autograd thread's last point before the main thread's next op after it, that op's
    begin), ns from the trace's origin (the floor of its earliest complete event's µs, as the loader reads it)."""
    with gzip.open(REAL / rel) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    origin = math.floor(min(float(e["ts"]) for e in ev))

    def ns(us: float) -> int:
        return round((us - origin) * 1000)

    engine = {e["tid"] for e in ev if str(e["name"]).startswith("autograd::engine::evaluate_function")}
    out = []
    for a in (e for e in ev if e["name"] == "## backward ##" and e.get("cat") == "user_annotation"):
        main = a["tid"]
        assert main not in engine
        a_end = float(a["ts"]) + float(a["dur"])
        nxt = min(float(e["ts"]) for e in ev if e["tid"] == main and e.get("cat") in HOST_CATS and e["ts"] >= a_end)
        last = max(float(e["ts"]) + float(e["dur"]) for e in ev if e["tid"] in engine and e.get("cat") in HOST_CATS
                   and float(e["ts"]) + float(e["dur"]) <= nxt)
        # the main thread recorded nothing between handing the backward over and this op: blocked in it
        silent = [e for e in ev if e["tid"] == main and e.get("cat") in HOST_CATS and float(a["ts"]) + 1000 < float(
            e["ts"]) < nxt]
        assert not silent
        out.append((ns(last), ns(nxt)))
    return out


@pytest.mark.real(NCCL)
def test_main_thread_resumes_from_the_autograd_threads_last_point():
    hand = _handovers(NCCL)
    assert len(hand) == 3
    assert all(1_000_000 < b - a < 2_000_000 for a, b in hand)  # past the tolerance: the evidence route's
    out = run_job(RankJob(str(REAL / NCCL), tracks=True))
    assert out.error is None and out.tracks is not None
    gaps = [(a, b) for a, b, _s, cause, _o in out.tracks.critical if cause == "host_gap"]
    for a, b in hand:
        assert (a, b) in gaps
    assert max(b - a for a, b in gaps) <= max(b - a for a, b in hand)
