"""Planted scenarios for issue #34's recall (part g, branch recallB): DDP copying every gradient back out of its
bucket (`gradient_as_bucket_view=False`), and device idle inside a CUDA-graph replay, each with a silent twin.

Each chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py); the
exact answers below are arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

DTOD = "Memcpy DtoD (Device -> Device)"
DIV = "void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> >, at::detail::Array<char*, 2> >"
BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"

N, OP_US, COPY_US = 100, 58.0, 4.0
# DDP without bucket views: 100 `copy_bucket_to_grad` ops of 58 us, 60 us apart, each launching (at +10 us) one 4-us
# DtoD copy that runs at +20 us: per step the device idles 58 − 4 = 54 us inside each op (5.40 ms) and copies for
# 0.40 ms: the bound is 5.40 + 0.40 = 5.80 ms per step (the device idles otherwise: nothing else runs then)
DDP_MS = N * OP_US / 1000


def _ddp(rk, k, facts, step, views: bool = False):
    """The copies back (views=False), or, with bucket views, the in-place divides DDP runs instead (same timing)."""
    if step is None:
        return
    h = rk.h
    for i in range(N):
        t = h + 5.0 + i * (OP_US + 2.0)
        rk.cpu("aten::div_" if views else BACK, t, OP_US)
        if views:
            rk.kernel(DIV, t + 20.0, COPY_US, at=t + 10.0)
        else:
            rk.kernel(DTOD, t + 20.0, COPY_US, cat="gpu_memcpy", at=t + 10.0)
    rk.h = h + 5.0 + N * (OP_US + 2.0) + 5.0
    rk.d = max(rk.d, rk.h - 20.0)


SMALL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
NODE = "triton_poi_fused_add_mul_0"
NODE_US, LEAD_US, GAP_US = 500.0, 2030.0, 4000.0
# One graph replay per step: a 10-us kernel at +5 us (launched at +0) opens the device's step; `cudaGraphLaunch` at
# +20 us (20 us), its stream free from +15 (the replay is ready at +20); recorded nodes (the launch's correlation id)
# at +2,050 and +6,550 us, 500 us each; the host waits for it in `cudaStreamSynchronize` from +60 us. Idle inside the
# replay in stretches ≥ 1 ms: 2,030 us before the first node and 4,000 us between the nodes: 6.03 ms per step,
# 2.03 of it before the first recorded node. The twin's nodes run back to back from +50 us: 30 us of idle.
GRAPH_MS = (LEAD_US + GAP_US) / 1000


def _graph(rk, k, facts, step, gaps: bool = True):
    if step is None:
        return
    h = rk.h
    rk.kernel(SMALL, h + 5.0, 10.0, at=h)
    rk.corr += 1
    rk.cpu("CompiledFunction", h + 18.0, 26.0)
    rk.runtime("cudaGraphLaunch", h + 20.0, 20.0, rk.corr)
    first = h + 20.0 + (LEAD_US if gaps else 30.0)
    second = first + NODE_US + (GAP_US if gaps else 0.0)
    for ts in (first, second):
        rk.ev.append({"ph": "X", "cat": "kernel", "name": NODE, "pid": 0, "tid": 7, "ts": ts, "dur": NODE_US,
                      "args": {"device": 0, "stream": 7, "correlation": rk.corr, "External id": rk.corr}})
    end = second + NODE_US
    rk.runtime("cudaStreamSynchronize", h + 60.0, end - (h + 60.0) + 5.0)
    rk.d = end
    rk.h = end + 10.0


def recall_g_scenarios() -> dict[str, tuple[Knobs, dict]]:
    g, r = DDP_MS, GRAPH_MS
    what = (f"{N} `copy_bucket_to_grad` ops of {OP_US:g} us per step, each one {COPY_US:g}-us DtoD copy: "
            f"{g:.2f} ms per step of device idle inside them and copies")
    return {
        "ddp_grad_copy": (Knobs(autograd=True, chore=_ddp), {
            "problems": [{"id": "ddp_grad_copy", "what": what,
                          "any": [{"where": "finding", "rules": ["ddp_grad_copy"], "gain_ms": [g - 0.01, g + 0.01],
                                   "text": r"gradient_as_bucket_view=True"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["ddp_grad_copy"], "gain_ms": [g - 0.01, g + 0.01],
                        "gain_outside": True, "why": f"the planted copies' cost is {g:.3f} ms per step"},
                       {"verdict": "right", "rules": ["ddp_grad_copy"], "why": what},
                       {"verdict": "right", "rules": ["host_bound"],
                        "why": "the device waits for the host's per-gradient copy ops: host-bound by construction "
                               "(the same idle as ddp_grad_copy's, counted once)"}]}),
        "ddp_bucket_view_twin": (Knobs(autograd=True, chore=partial(_ddp, views=True)), {
            "problems": [], "claims": [{"verdict": "right", "rules": ["host_bound"],
                                        "why": "the device waits for the host's per-gradient divides: host-bound"}],
            "silent": [{"id": "no_ddp_grad_copy", "why": "bucket views: in-place divides, no copy_bucket_to_grad",
                        "match": {"where": "finding", "rules": ["ddp_grad_copy"]}}]}),
        "graph_replay_idle": (Knobs(chore=_graph), {
            "problems": [{"id": "graph_replay_idle", "what": f"{r:.2f} ms per step of device idle inside a CUDA-graph "
                                                             "replay, its cause not in the trace",
                          "any": [{"where": "finding", "rules": ["graph_replay_idle"], "gain_ms": [r - 0.01, r + 0.01],
                                   "text": r"2\.03 ms of it before a replay's first recorded node[\s\S]*"
                                           r"cudaStreamSynchronize[\s\S]*does not show what the replays waited on"}]}],
            "silent": [],
            "claims": [{"verdict": "wrong", "rules": ["graph_replay_idle"], "gain_ms": [r - 0.01, r + 0.01],
                        "gain_outside": True, "why": f"the planted idle inside the replay is {r:.3f} ms per step"},
                       {"verdict": "right", "rules": ["graph_replay_idle"], "why": "idle inside the replay, by "
                                                                                   "construction"},
                       {"verdict": "wrong", "rules": ["host_bound", "host_sync"],
                        "why": "the replay's work was queued: the device did not wait for the host"}]}),
        "graph_replay_twin": (Knobs(chore=partial(_graph, gaps=False)), {
            "problems": [], "claims": [],
            "silent": [{"id": "no_graph_replay_idle", "why": "the replay's nodes run back to back (30 us of idle)",
                        "match": {"where": "finding", "rules": ["graph_replay_idle"]}}]}),
    }
