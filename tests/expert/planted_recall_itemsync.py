"""Planted scenarios for issue #34's item()-sync recall (helper "itemsync"): a small blocking device-to-host read
(`.item()` under `## sparse_data_dist ##`) that drains the device queue once per step and holds the host under 10 %
of the step, after which the device starves until the host's next launch (hta/trace_diff/control: 3.6 ms held,
0.5 ms of device idle after such reads per step), and its silent twin: the same read with a side-stream copy
keeping the device busy through the refill. The answers are arithmetic on the placed durations, written out by
hand here, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, at::detail::Array<char*, 1> >"
N, K_US, HOST_US = 4, 2000.0, 800.0
# At each step's start (device drained, host at h0): 4 GEMMs of 2,000 µs launched at h0+10..h0+40, run back to back
# from h0+20 to h0+8,020. Under `## sparse_data_dist ##` ← `aten::item` ← `aten::_local_scalar_dense`,
# `cudaMemcpyAsync` at h0+60; its 8-B DtoH copy runs at h0+8,020 (the queue drained) for 2 µs; the call returns at
# h0+8,030. Hold: 8,020 - 60 = 7,960 µs = 7.96 ms per step. The host then works 800 µs (`aten::cumsum`, from
# h0+8,035) and launches a 20-µs fill at h0+8,835, which starts at h0+8,845: the device idles from the copy's end
# (h0+8,022) to h0+8,845 = 823 µs = 0.82 ms per step (the refill, under the 7.96-ms hold that caps it).
HOLD_MS = (N * K_US + 20.0 - 60.0) / 1000
REFILL_MS = ((N * K_US + 20.0 + 10.0 + 5.0 + HOST_US + 10.0) - (N * K_US + 20.0 + 2.0)) / 1000
# The twin: the same read, plus a 9,000-µs pinned HtoD batch copy on side stream 9 launched at h0+45 and run from
# h0+50 to h0+9,050: the device is busy from the copy's end until the fill starts (h0+8,845): no idle after it.
SIDE_US = 9000.0


def _item(rk, k, facts, step, busy: bool = False):
    if step is None:
        return
    h0 = max(rk.h, rk.d)
    for j in range(N):
        rk.kernel(GEMM, h0 + 20.0 + j * K_US, K_US, at=h0 + 10.0 + 10.0 * j)
    if busy:
        rk.kernel("Memcpy HtoD (Pinned -> Device)", h0 + 50.0, SIDE_US, stream=9, cat="gpu_memcpy", at=h0 + 45.0)
    call, copy_at = h0 + 60.0, h0 + 20.0 + N * K_US
    ret = copy_at + 10.0
    rk.cpu("## sparse_data_dist ##", call - 10.0, ret - call + 20.0, cat="user_annotation")
    rk.cpu("aten::item", call - 5.0, ret - call + 10.0)
    rk.cpu("aten::_local_scalar_dense", call - 3.0, ret - call + 6.0)
    rk.corr += 1
    rk.runtime("cudaMemcpyAsync", call, ret - call, rk.corr)
    rk.ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
                  "ts": copy_at, "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": rk.corr,
                                                      "bytes": 8}})
    rk.cpu("aten::cumsum", ret + 5.0, HOST_US)
    fill = ret + 5.0 + HOST_US
    rk.kernel(FILL, fill + 10.0, 20.0, at=fill)
    rk.h = fill + 15.0
    rk.d = max(fill + 30.0, h0 + 50.0 + SIDE_US if busy else 0.0)


def register(out: dict) -> None:
    held = (rf"8 B, 2\.0 µs of copy\) under `aten::_local_scalar_dense` ← `aten::item` ← `## sparse_data_dist ##` "
            rf"holds the host {HOLD_MS:.2f} ms per step")
    out["held_read_refill"] = (Knobs(chore=_item), {
        "problems": [{"id": "held_read_refill", "what": f"an 8-B `.item()` read holds the host {HOLD_MS:.2f} ms per "
                                                        f"step while 4 GEMMs drain; the device then idles "
                                                        f"{REFILL_MS:.2f} ms per step until the host's next launch",
                      "any": [{"where": "finding", "rules": ["held_read"],
                               "text": held + rf"[\s\S]*idled {REFILL_MS:.2f} ms per step before the first op "
                                              r"launched after the read returned[\s\S]*not for the copy"
                                              rf"[\s\S]*{REFILL_MS:.2f} ms per step"}]}],
        "silent": [{"id": "no_pin_advice", "why": "the host waits on queued work: pinning does not remove it",
                    "match": {"where": "finding", "rules": ["host_sync", "pageable_copy"]}}],
        "claims": [{"verdict": "right", "rules": ["held_read"], "why": "the planted read and its refill idle"}]})
    out["held_read_refill_busy_twin"] = (Knobs(chore=partial(_item, busy=True)), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_held_read", "why": "a side-stream copy keeps the device busy through the refill",
                    "match": {"where": "finding", "rules": ["held_read"]}}]})
