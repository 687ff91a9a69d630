"""The held_read rule (rules/held_reads.py, metrics/rank/held_reads.py): a small device-to-host read that holds
the host while queued device work drains (hta/a100_16rank_alltoall_rank0: a 2-µs `Memcpy DtoH (Device ->
Pageable)` under `aten::to` in `## sparse_data_dist ##` holds the host ~145 ms per step).

Generated steps of 10 ms (answers by construction): 4 kernels of 2,000 µs launched at 0-30 µs run back to back from
50 µs; under `## sparse_data_dist ##` ← `aten::to` the host calls `cudaMemcpyAsync` at 100 µs, whose 2-µs DtoH copy
(704 bytes) runs at 8,050 µs when the queue drains; the call returns at 8,060. Hold: 8,050 - 100 = 7,950 µs = 7.95 ms per
step; the device busy all of it (7.95 ms, idle 0); 3 kernels launched before the call start inside the hold; the
next device op is a 10-µs kernel launched at 9,490 and run at 9,500: starved 9,500 - 8,052 = 1,448 µs = 1.448 ms
per step, the gain bound. The same read as `.item()` does in recent PyTorch (the copy call returning at once, a
`cudaStreamSynchronize` from 120 µs holding the host until the copy ran): 7.93 ms per step. Twins: the read with nothing queued (kernels launched after it: the copy starts 5 µs
after the call), and a 4,000-µs DtoH transfer after the same queue (the copy is the cost, not a read)."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import MAIN_TID, TraceBuilder

STEP = 10_000


def _trace(path, kind: str) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        queued = kind != "idle"
        first = t + 50 if queued else t + 400
        for k in range(4):
            b.kernel("volta_sgemm_128x64_tn", first + 2000 * k, 2000, launch_at=t + 10 * k + (0 if queued else 390))
        call_at = t + 100 if queued else t + 20
        copy_at = t + 8050 if queued else t + 25
        copy_dur = 4000 if kind == "transfer" else 2
        ret = copy_at + copy_dur + 8
        b.annotation("## sparse_data_dist ##", call_at - 10, ret - call_at + 20)
        b.cpu_op("aten::to", call_at - 5, ret - call_at + 10)
        b.kernel("Memcpy DtoH (Device -> Pageable)", copy_at, copy_dur, cat="gpu_memcpy", launch=False,
                 args={"bytes": 704})
        sync = kind == "sync"  # the call returns at once; a stream synchronize 20 µs later holds the host instead
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": b.pid, "tid": MAIN_TID,
               "ts": b._abs(call_at), "dur": 10 if sync else ret - call_at,
               "args": {"correlation": b._corr, "External id": b._ext}})
        if sync:
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid, "tid": MAIN_TID,
                   "ts": b._abs(call_at + 20), "dur": ret - call_at - 20, "args": {"correlation": 60_000 + n}})
        b.kernel("vectorized_elementwise_kernel", t + 9500, 10, launch_at=t + 9490)
    d = path / "job"
    d.mkdir()
    b.write(d / "rank0.json")
    return d


def _analyze(tmp_path, kind: str):
    a = analyze_path(str(_trace(tmp_path, kind)), jobs=1)
    return a, {f.id: f for f in a.findings}


def test_held_read_names_the_read_its_hold_and_the_starved_device(tmp_path):
    a, got = _analyze(tmp_path, "held")
    h = a.ranks[0].held_reads
    assert h.held_ms == pytest.approx(7.95, abs=1e-6)
    assert h.busy_ms == pytest.approx(7.95, abs=1e-6)
    assert h.queued == 3 and h.longest_ms == pytest.approx(7.95, abs=1e-6) and h.steps == 3
    assert h.starved_ms == pytest.approx(1.448, abs=1e-6)
    assert h.copy_us == pytest.approx(2.0) and h.copy_bytes == 704
    assert h.stack == ["aten::to", "## sparse_data_dist ##"]
    f = got["held_read"]
    # the same idle read as the refill (copy end to the first op launched after the return); the graph is not
    # simulated here (a 1.45-ms unprofiled host gap per step: sim_graph.unexplained_share), so an estimate
    assert h.refill_ms == pytest.approx(1.448, abs=1e-6) and h.all_refill_ms == pytest.approx(1.448, abs=1e-6)
    assert f.gain_ms == pytest.approx(1.448, abs=1e-6) and f.gain_kind == "estimate"
    assert "704 B, 2.0 µs of copy" in f.evidence.text and "7.95 ms per step" in f.evidence.text and "`aten::to` ← `## sparse_data_dist ##`" in f.evidence.text
    assert "not for the copy" in f.action and "sparse_data_dist" in f.action


def test_held_read_through_the_synchronize_after_an_async_copy(tmp_path):
    # the hold starts with the synchronize at 120 µs: 8,050 - 120 = 7,930 µs = 7.93 ms per step; the same 3 GEMMs
    # start inside it, the same 1.448 ms starved after the copy
    a, got = _analyze(tmp_path, "sync")
    h = a.ranks[0].held_reads
    assert h.call == "cudaMemcpyAsync + cudaStreamSynchronize"
    assert h.held_ms == pytest.approx(7.93, abs=1e-6) and h.queued == 3
    assert h.starved_ms == pytest.approx(1.448, abs=1e-6) and h.stack == ["aten::to", "## sparse_data_dist ##"]
    assert "held_read" in got


@pytest.mark.parametrize("kind", ["idle", "transfer"])
def test_held_read_silent_without_a_queue_or_for_a_transfer(tmp_path, kind):
    a, got = _analyze(tmp_path, kind)
    assert "held_read" not in got
    assert a.ranks[0].held_reads is None
