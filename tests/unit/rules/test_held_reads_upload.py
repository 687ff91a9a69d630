"""held_read on a pageable upload a synchronize waits for (torchrec sst_long_a2a_optimizer_3: `aten::index` with a
CPU index tensor, `Memcpy HtoD (Pageable -> Device)` held ~31 ms per step in the `cudaStreamSynchronize` after its
`cudaMemcpyAsync`), and the refill after the drain.

Generated steps of 10 ms (answers by construction): 4 kernels of 2,000 µs launched at 0-30 µs run back to back from
50 µs to 8,050. Under `aten::index` ← `aten::to` the host calls `cudaMemcpyAsync` at 100 µs (returning at 110: the
copy is queued), then `cudaStreamSynchronize` from 120 to 8,053; the 3-µs upload runs at 8,060, 7 µs after the sync
returned (a device clock behind the host's, within the 50-µs tolerance). Hold: 8,060 - 120 = 7,940 µs = 7.94 ms per
step (79.4 % of the step). The next device op, a 10-µs kernel launched at 9,490, starts at 9,500: the device idles
from the copy's end (8,063) to 9,500 = 1,437 µs = 1.437 ms per step (the refill, under the hold). Twin: the same
copy held in its own call (`cudaMemcpyAsync` from 100 to 8,070): the pageable_copy chore's, no held read."""

from __future__ import annotations

import pytest

from llmdiag.diagnose.analyze import analyze_path
from tests.gen.builder import MAIN_TID, TraceBuilder

STEP = 10_000


def _trace(path, synced: bool):
    b = TraceBuilder(rank=0, world_size=1)
    for n in range(3):
        t = n * STEP
        b.step(n + 1, t, t + STEP)
        for k in range(4):
            b.kernel("volta_sgemm_128x64_tn", t + 50 + 2000 * k, 2000, launch_at=t + 10 * k)
        b.cpu_op("aten::index", t + 90, 8000)
        b.cpu_op("aten::to", t + 95, 7990)
        b.kernel("Memcpy HtoD (Pageable -> Device)", t + 8060, 3, cat="gpu_memcpy", launch=False)
        b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": b.pid, "tid": MAIN_TID,
               "ts": b._abs(t + 100), "dur": 10 if synced else 7970,
               "args": {"correlation": b._corr, "External id": b._ext}})
        if synced:
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid, "tid": MAIN_TID,
                   "ts": b._abs(t + 120), "dur": 7933, "args": {"correlation": 60_000 + n}})
        b.kernel("vectorized_elementwise_kernel", t + 9500, 10, launch_at=t + 9490)
    d = path / "job"
    d.mkdir()
    b.write(d / "rank0.json")
    return d


def test_pageable_upload_held_in_the_sync_after_it(tmp_path):
    a = analyze_path(str(_trace(tmp_path, True)), jobs=1)
    h = a.ranks[0].held_reads
    assert h.to_device and h.call == "cudaMemcpyAsync + cudaStreamSynchronize"
    assert h.held_ms == pytest.approx(7.94, abs=1e-6) and h.queued == 3
    assert h.refill_ms == pytest.approx(1.437, abs=1e-6) and h.stack == ["aten::to", "aten::index"]
    f = next(f for f in a.findings if f.id == "held_read")
    assert "pageable memory" in f.title and "← `aten::index` holds the host 7.94 ms per step" in f.evidence.text
    assert "`.pin_memory()`" in f.action and "non_blocking=True" in f.action


def test_pageable_upload_held_in_its_own_call_is_not_a_held_read(tmp_path):
    a = analyze_path(str(_trace(tmp_path, False)), jobs=1)
    assert a.ranks[0].held_reads is None
    assert "held_read" not in {f.id for f in a.findings}
