"""Quantized communication: whether its codec pays for itself over the whole step (its encode/decode kernels, forward
and backward, against the all_to_all time the smaller wire format saves)."""

from __future__ import annotations

import re

from llmdiag.diagnose.model import stats as statistics  # the standard one imports random, fractions, decimal

from llmdiag.diagnose.model.analysis import Finding
from llmdiag.diagnose.model.format import fmt, plural
from llmdiag.diagnose.rules.base import Ctx, severity_for, steps_where

MIN_SHARE = 0.01  # codec kernels below 1 % of the rank's compute get no finding
MIN_NET = 0.01  # a net cost under 1 % of the step is break-even within the estimate: no finding
SOURCE_BITS = 32  # what the codec converts from: fp32 embeddings/gradients (TorchRec's default comm dtype); assumed
WIRE_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "half": 16, "fp8": 8, "int8": 8, "int4": 4}


def wire_bits(precision: str) -> int | None:
    """Bits per element on the wire of every precision the codec ranges name; None where one is unknown or they
    differ (no single ratio to scale the exchange by)."""
    bits = {WIRE_BITS.get(p.strip().lower()) for p in re.split(r",\s*", precision) if p.strip()}
    return bits.pop() if len(bits) == 1 and None not in bits else None


def comm_codec(c: Ctx) -> list[Finding]:
    """A quantized-comm codec (TorchRec `QCommsConfig`: `## encoder <precision> ##` / `## decoder ... ##` ranges)
    whose cost exceeds what it saves. Cost: the device time of its kernels, forward (inside the ranges) and backward
    (its ops' gradient nodes beside the exchange's backward), mean over ranks. Saving (an upper bound): the encoded
    collectives' byte-bound time (an exchange and its backward move the same bytes: the shorter of the two, on the
    rank that waits least) × (source bits / wire bits − 1), i.e. the exchange sent unquantized takes that much longer
    if its time scales with its bytes. Silent where the saving reaches the cost (it pays, or breaks even)."""
    rows = []
    for r in c.ranks:
        cc = r.comm_codec
        if cc is None or not r.compute_ms:
            continue
        cost = cc.encode_ms_per_step + cc.decode_ms_per_step + cc.backward_ms_per_step
        if cost > 0 and cost >= MIN_SHARE * r.compute_ms and cc.wire_count_per_step > 0:
            rows.append((r, cost, cc))
    bits = {wire_bits(x[2].precision) for x in rows}
    if not rows or len(bits) != 1 or (b := bits.pop()) is None:
        return []
    cost = statistics.fmean(x[1] for x in rows)
    least = min(rows, key=lambda x: x[2].wire_bytes_bound_ms_per_step)
    lc = least[2]
    saved = lc.wire_bytes_bound_ms_per_step * (SOURCE_BITS / b - 1)
    net = cost - saved
    if not c.step_ms or net < MIN_NET * c.step_ms:
        return []
    r, top, cc = max(rows, key=lambda x: x[1])
    ev = (f"rank {r.rank}: the {cc.precision} codec of its quantized communication launches "
          f"{fmt(cc.encode_ms_per_step, 'ms')} of encode and {fmt(cc.decode_ms_per_step, 'ms')} of decode kernels per "
          f"step in its `## encoder`/`## decoder` ranges and {fmt(cc.backward_ms_per_step, 'ms')} in their gradients "
          f"(the autograd nodes beside the exchange's backward), {fmt(top, 'ms')} in all "
          f"({fmt(top / r.compute_ms, 'pct')} of its {fmt(r.compute_ms, 'ms')} compute); mean {fmt(cost, 'ms')} over "
          f"{plural(len(rows), 'rank')}; its host time, {fmt(cc.host_ms_per_step, 'ms')} per step in the ranges and "
          f"nodes, is not added (hidden where the host runs ahead of the device). The all_to_all it encodes ({fmt(lc.wire_count_per_step, 'avg')} kernels per "
          f"step, forward and backward) takes {fmt(lc.wire_ms_per_step, 'ms')} per step on rank {least[0].rank}, the "
          f"rank that waits least in it; {fmt(lc.wire_bytes_bound_ms_per_step, 'ms')} of that can scale with its "
          f"bytes (an exchange and its backward move the same bytes: the shorter counts). Sent as fp{SOURCE_BITS} "
          f"(assumed source) instead of {b}-bit, it would take at most {fmt(saved, 'ms')} longer: the codec costs "
          f"{fmt(net, 'ms')} per step more than it saves")
    act = ("the codec's casts cost more device time than the smaller exchange saves on this link: drop it "
           "(`qcomms_config=None`) or quantize only the direction whose exchange is long (forward_precision / "
           "backward_precision), or run the quantization fused with the exchange (fbgemm's fused quantized "
           "communication kernels) so the casts do not run as separate kernels; confirm with a profile of each "
           "(`llmdiag diff`)")
    eg = c.gain_text(net, f"estimate, not simulated: the codec's kernel time ({fmt(cost, 'ms')}) less the "
                     f"all_to_all time it saves at most ({fmt(saved, 'ms')}, the byte-bound time × "
                     f"({SOURCE_BITS}/{b} − 1): the exchange's time assumed to scale with its bytes; a latency- or "
                     "contention-bound one saves less, so the net is at least this); the codec's kernels and the "
                     "exchange are assumed to lie on the step's path")
    return [c.finding("comm_codec", severity_for(net, c.step_ms), "Quantized communication costs more than it saves",
                      ev, [x[0].rank for x in rows], steps_where([r]), act, eg, net, "ranks[].comm_codec",
                      gain_kind="estimate",
                      events=["`## encoder` / `## decoder` user annotations", "kernels launched inside them",
                              "autograd::engine::evaluate_function nodes", "all_to_all kernels"])]
