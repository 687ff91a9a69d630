"""Planted scenarios for the launch-overhead class (host_bound): device idle that waits for the host's next launch,
named for what the host spends it in, with silent twins where the idle is not the launches' (queued work,
zero_grad's fills). Real cases: hta/trace_diff/control (A100: 8.9 ms/step of short waited gaps, 1.8 ms of it in
the launch calls) and the kineto ResNet-50 samples (V100: 16.1-17.2 ms/step, 2.4-2.7 in the launch calls, 5.8-6.2
of it zero_grad's). Each chore places its events at a step's start, the device drained (Knobs.chore); the answers
below are arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs
from tests.expert.planted_recall_b import ZG_IDLE_MS, _zero_grad

TINY = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, at::detail::Array<char*, 2> >"
LONG = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>"
N, P, K = 400, 40.0, 3.0  # ops per step, the host's period per op (us), each op's kernel (us)
# Op i at t_i = h + i*P: the op [t_i, t_i + P - 2], its launch call [t_i + 5, t_i + 5 + L], its kernel starting 2 us
# before the call returns. Consecutive kernels leave a gap of P - K = 37 us; the next call covers L - 2 us of it
# (the previous call ended 1 us before the gap began). The gap after the last op, to the job's next kernel (its
# launching op 30 us, the call [h', h' + 8], the kernel at h' + 10): 44 - L us, 8 of them in that call.
# The job's own short waited gaps come on top where a window convention counts them: the step's lead-in before the
# chore's first kernel (the drained step start, 50 us, then 8 + L us) and the all_to_all kernel 20 us after its
# launch (the host then inside the collective's op: a communication wait): at most 78 + L us per step.


def wait_ms(call_us: float) -> float:
    """The planted launch-waited idle per step in the chore's gaps (ms): what the finding must at least claim."""
    return ((N - 1) * (P - K) + (44.0 - call_us)) / 1000


def base_ms(call_us: float) -> float:
    """The job's own short waited gaps per step, at most (ms): the upper tolerance."""
    return (78.0 + call_us) / 1000


def in_call_ms(call_us: float) -> float:
    """Of the chore's waited idle, the part inside the launch calls (ms): L - 2 per inner gap, 8 in the last."""
    return ((N - 1) * (call_us - 2.0) + 8.0) / 1000


def _ops(rk, k, facts, step, call_us: float, queued: bool = False):
    """N host ops, each launching one K-us kernel through a call_us-long launch call. `queued`: one long kernel
    launched first, so every tiny kernel waits behind it (the device never waits for a launch)."""
    if step is None:
        return
    h, keep = rk.h, rk.launch_us
    d = rk.d
    if queued:
        rk.launch_us = 8.0
        rk.cpu("aten::cat", h, 12.0)
        rk.kernel(LONG, h + 10.0, N * P + 2000.0, at=h + 1.0)
        d, h = h + 10.0 + N * P + 2000.0, h + 20.0
    rk.launch_us = call_us
    for i in range(N):
        t = h + i * P
        rk.cpu("aten::add", t, P - 2.0)
        start = max(d, t + 3.0 + call_us)
        rk.kernel(TINY, start, K, at=t + 5.0)
        d = start + K
    rk.launch_us = keep
    rk.h, rk.d = h + N * P, d


def _zero_grad_twice(rk, k, facts, step):
    """Two zero_grad calls per step (as with two optimizers): 2 x ZG_IDLE_MS of idle, all zero_grad's."""
    _zero_grad(rk, k, facts, step)
    _zero_grad(rk, k, facts, step)


def recall_c_scenarios() -> dict[str, tuple[Knobs, dict]]:
    out = {}
    for name, call, title in (("launch_calls_wait", 30.0, r"behind kernel launches"),
                              ("host_ops_wait", 4.0, r"behind host ops between launches")):
        g, ic = wait_ms(call), in_call_ms(call)
        rng = [g - 0.005, g + base_ms(call)]
        share = ic / g
        calls = rf"{int(ic * 10) // 10}\.{int(ic * 10) % 10}\d ms falls inside the launch calls"
        out[name] = (Knobs(chore=partial(_ops, call_us=call)), {
            "problems": [{"id": "launch_wait", "what": f"{N} ops per step, each a {K:g}-us kernel {P:g} us apart, "
                                                       f"launch calls of {call:g} us: {g:.2f} ms/step of waited idle, "
                                                       f"{100 * share:.0f} % of it in the calls",
                          "any": [{"where": "finding", "rules": ["host_bound"], "text": title + ".*" + calls, "gain_ms": rng,
                                   "min_severity": "high"}]}],
            "silent": [{"id": "title_follows_calls", "why": f"the calls hold {100 * share:.0f} % of the waited idle",
                        "match": {"where": "finding", "rules": ["host_bound"],
                                  "not_text": title}}],
            "claims": [{"verdict": "wrong", "rules": ["host_bound"], "gain_ms": rng, "gain_outside": True,
                        "why": f"the planted waited idle is {g:.3f} ms per step"},
                       {"verdict": "right", "rules": ["host_bound"], "text": title, "why": "by construction"},
                       {"verdict": "wrong", "rules": ["host_bound"], "why": "titled for the wrong host work"}]})
    out["launch_queued_twin"] = (Knobs(chore=partial(_ops, call_us=30.0, queued=True)), {
        "problems": [], "claims": [],
        "silent": [{"id": "no_launch_bound", "why": "the same ops and calls, every tiny kernel queued behind a long "
                                                    "one: the device never waits for a launch",
                    "match": {"where": "finding", "rules": ["host_bound"]}}]})
    out["zero_grad_launch_twin"] = (Knobs(chore=_zero_grad_twice), {
        "problems": [],
        "claims": [{"verdict": "right", "rules": ["zero_grad"], "gain_ms": [2 * ZG_IDLE_MS - 0.05, 2 * ZG_IDLE_MS + 0.05],
                    "why": f"two zero_grad calls per step, {ZG_IDLE_MS:.2f} ms of idle each"}],
        "silent": [{"id": "zero_grad_not_launch", "why": f"the only waited idle is zero_grad's 2 x {ZG_IDLE_MS:.2f} "
                                                         "ms per step (its own finding), over 5 % of the step",
                    "match": {"where": "finding", "rules": ["host_bound"]}}]})
    return out
