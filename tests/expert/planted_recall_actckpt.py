"""Planted scenario for activation checkpointing's recomputation (branch actckpt): every step, inside backward's
`torch/utils/checkpoint.py(1500): recompute_fn` Python span, ten `aten::convolution` ops each launch one 500-us
kernel; the silent twin runs the same ops and kernels with no checkpoint span (a plain forward, nothing recomputed).

The chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py); the exact
answer below is arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

CONV = "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32"
RECOMPUTE = "torch/utils/checkpoint.py(1500): recompute_fn"

N, OP_US, KERNEL_US = 10, 40.0, 500.0
# Ten host ops 50 us apart, each launching (at +10 us) one 500-us kernel that starts at max(device free, +20 us): the
# kernels run back to back, nothing else on the device meanwhile (no collective): 10 × 0.5 = 5.00 ms per step of
# recomputed forward, all of it device compute on the rank's path (the bound the finding states)
RECOMPUTE_MS = N * KERNEL_US / 1000


def _recompute(rk, k, facts, step, checkpoint: bool = True):
    if step is None:
        return
    h = rk.h
    d = max(rk.d, h)
    if checkpoint:
        rk.cpu(RECOMPUTE, h + 2.0, N * (OP_US + 10.0) + 6.0, cat="python_function")
    for i in range(N):
        t = h + 5.0 + i * (OP_US + 10.0)
        rk.cpu("aten::convolution", t, OP_US)
        d = max(d, t + 20.0)
        rk.kernel(CONV, d, KERNEL_US, at=t + 10.0)
        d += KERNEL_US
    rk.h = h + 5.0 + N * (OP_US + 10.0) + 5.0
    rk.d = d


def recall_actckpt_scenarios() -> dict[str, tuple[Knobs, dict]]:
    g = RECOMPUTE_MS
    what = (f"{N} convolutions per step recomputed inside `recompute_fn`, each one {KERNEL_US:g}-us kernel: "
            f"{g:.2f} ms per step")
    return {
        "activation_recompute": (Knobs(chore=_recompute), {
            "problems": [{"id": "activation_recompute", "what": what,
                          "any": [{"where": "finding", "rules": ["activation_recompute"],
                                   "gain_ms": [g - 0.01, g + 0.01],
                                   "text": r"recompute_fn[\s\S]*not read[\s\S]*max_memory_allocated"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["activation_recompute"], "gain_ms": [g - 0.01, g + 0.01],
                        "gain_outside": True, "why": f"the planted recomputed kernels take {g:.3f} ms per step"},
                       {"verdict": "right", "rules": ["activation_recompute"], "why": what}]}),
        "activation_recompute_twin": (Knobs(chore=partial(_recompute, checkpoint=False)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_activation_recompute", "why": "the same convolutions run with no checkpoint span",
                        "match": {"where": "finding", "rules": ["activation_recompute"]}}]}),
    }


def register(out: dict) -> None:
    """Adds these scenarios."""
    out.update(recall_actckpt_scenarios())
