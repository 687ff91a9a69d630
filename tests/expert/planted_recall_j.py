"""Planted scenario for data movement (branch datamove): every step concatenates on the device, ten `aten::cat` ops
each launching one `CatArrayBatchedCopy` kernel, with a silent twin whose same-length copies are casts
(`aten::to` -> `aten::_to_copy` -> `aten::copy_`, a conversion the rule leaves out).

The chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py); the exact
answer below is arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

CAT = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"
CAST = ("void at::native::elementwise_kernel<128, 2, void at::native::gpu_kernel_impl_nocast<at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>")

N, OP_US, KERNEL_US = 10, 40.0, 1500.0
# Ten host ops 50 us apart, each launching (at +10 us) one 1,500-us kernel that starts at max(device free, +20 us):
# the kernels run back to back, nothing else on the device meanwhile: 10 × 1.5 = 15.00 ms per step of cat kernels,
# all of it on the device's busy path (the bound the finding states)
CAT_MS = N * KERNEL_US / 1000


def _cat(rk, k, facts, step, casts: bool = False):
    if step is None:
        return
    h = rk.h
    d = max(rk.d, h)
    for i in range(N):
        t = h + 5.0 + i * (OP_US + 10.0)
        if casts:
            rk.cpu("aten::to", t, OP_US)
            rk.cpu("aten::_to_copy", t + 1.0, OP_US - 2.0)
            rk.cpu("aten::copy_", t + 2.0, OP_US - 4.0)
        else:
            rk.cpu("aten::cat", t, OP_US)
        d = max(d, t + 20.0)
        rk.kernel(CAST if casts else CAT, d, KERNEL_US, at=t + 10.0)
        d += KERNEL_US
    rk.h = h + 5.0 + N * (OP_US + 10.0) + 5.0
    rk.d = d


def recall_j_scenarios() -> dict[str, tuple[Knobs, dict]]:
    g = CAT_MS
    what = f"{N} `aten::cat` ops per step, each one {KERNEL_US:g}-us CatArrayBatchedCopy kernel: {g:.2f} ms per step"
    return {
        "data_movement_cat": (Knobs(chore=_cat), {
            "problems": [{"id": "data_movement_cat", "what": what,
                          "any": [{"where": "finding", "rules": ["data_movement"], "gain_ms": [g - 0.01, g + 0.01],
                                   "text": r"concatenation[\s\S]*`aten::cat`[\s\S]*preallocate"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["data_movement"], "gain_ms": [g - 0.01, g + 0.01],
                        "gain_outside": True, "why": f"the planted cat kernels take {g:.3f} ms per step"},
                       {"verdict": "right", "rules": ["data_movement"], "why": what}]}),
        "data_movement_cast_twin": (Knobs(chore=partial(_cat, casts=True)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_data_movement", "why": "the same copies are dtype casts under aten::_to_copy",
                        "match": {"where": "finding", "rules": ["data_movement"]}}]}),
    }


def register(out: dict) -> None:
    """Adds these scenarios, and says data_movement is right in launch_queued_twin (planted_recall_c.py): its long
    blocker kernel is a `CatArrayBatchedCopy` launched by `aten::cat` every step, a true concatenation cost."""
    out.update(recall_j_scenarios())
    if "launch_queued_twin" in out:
        out["launch_queued_twin"][1]["claims"] = out["launch_queued_twin"][1].get("claims", []) + [
            {"verdict": "right", "rules": ["data_movement"],
             "why": "its blocker is one long CatArrayBatchedCopy kernel launched by aten::cat in every step"}]
