"""Planted scenarios for the quantized-comm codec's net verdict (branch codec, issue #34 A3-P2): the codec's kernels
against the all_to_all time its smaller wire format saves. The answers are arithmetic on the placed durations
(tests/expert/planted.py `_codec`, its forward all_to_all 2,500 us), written out by hand, not read from llmdiag."""

from __future__ import annotations

from tests.expert.planted import Knobs

A2A_MS = 2.5  # the planted forward all_to_all, between the encode and the decode cast; no backward codec in the job


def codec_net_scenarios() -> dict[str, tuple[Knobs, dict]]:
    """Costly: a 6 ms encode + 3 ms decode cast = 9.00 ms per step against at most 2.50 × (32/16 − 1) = 2.50 ms
    saved: net 6.50 ms per step. Pays: a 1 ms + 0.5 ms cast (1.5 % of its 98.1 ms compute, above the floor) against
    the same 2.50 ms saved: silent."""
    cost, saved = 6.0 + 3.0, A2A_MS * (32 / 16 - 1)
    net = cost - saved
    text = (rf"6\.00 ms of encode and 3\.00 ms of decode .* 9\.00 ms in all .* at most {saved:.2f} ms longer: the "
            rf"codec costs {net:.2f} ms per step more than it saves")
    return {
        "qcomm_codec": (Knobs(qcomm_ms=6.0), {
            "problems": [{"id": "codec_net_cost", "what": f"9 ms of codec casts against ≤ {saved:.1f} ms saved",
                          "any": [{"where": "finding", "rules": ["comm_codec"], "text": text,
                                   "gain_ms": [net - 0.01, net + 0.01]}]}],
            "silent": [],
            "claims": [{"verdict": "right", "rules": ["comm_codec"], "text": text, "why": "by construction"},
                       {"verdict": "wrong", "rules": ["comm_codec"], "why": "a number off the planted one"}]}),
        "qcomm_codec_pays_twin": (Knobs(qcomm_ms=1.0), {
            "problems": [], "claims": [],
            "silent": [{"id": "codec_pays", "why": "1.5 ms of casts against up to 2.5 ms of all_to_all saved",
                        "match": {"where": "finding", "rules": ["comm_codec"]}}]}),
    }


def register(out: dict) -> None:
    """Replaces planted_recall_a.py's qcomm_codec (its forward-only text) and adds the twin that pays."""
    out.update(codec_net_scenarios())
