"""Planted scenarios for issue #34's recall (branch ncclsync, hta/nccl_data's B6-P3 and B6-P4): on a rank whose
host sets the step (every launching op 4 ms of host work, as nccl_data's 5-50x slow ops),

1. a foreach SGD step (`Optimizer.step#SGD.step` holding three `aten::_foreach_*` ops of 5 ms of host each, three
   20-us multi-tensor kernels each): `fused=True` cuts its host ops, whatever the host's speed. Twins: the same span
   already fused (`aten::_fused_sgd_`, its fused kernels): silent; the same foreach ops whose kernels keep the
   device busy through the span (a GPU-bound step): silent.
2. a 64 MiB all-reduce taking 10 ms (6.7 GB/s) that nothing waits on: the host launches its consumer (a DtoD copy)
   after 16 ms of host ops, so it is off the critical path now; low_busbw states it with the bound it may cost
   once the host no longer sets the step. Twin: the same all-reduce at 0.4 ms (168 GB/s): silent.

Each chore places its events at a step's start, the device drained (Knobs.chore, tests/expert/planted.py); the
exact answers below are arithmetic on the placed durations, written out by hand, not read back from llmdiag."""

from __future__ import annotations

from functools import partial

from tests.expert.planted import Knobs

FOREACH_K = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
             "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
             "std::plus<float>, float>")
FUSED_K = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
           "FusedOptimizerTensorListMetadata<3>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 3>, "
           "float*, double, double, double, bool, bool, bool, float*, float*>")
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COPY = "Memcpy DtoD (Device -> Device)"
TINY = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >")

HOST_US = 4000.0  # every launching op of the base job: the host sets the step
OPS, OP_US, K_US, KS = 3, 5000.0, 20.0, 3
# span 3 x 5000 + 10 = 15,010 us; device busy inside it 3 x 3 x 20 = 180 us: 14.83 ms of idle per step
OPT_IDLE_MS = (OPS * OP_US + 10.0 - OPS * KS * K_US) / 1000
NELEMS = 16 * 2**20  # fp32: 64 MiB = 67,108,864 bytes
AR_US = 10_000.0  # 6.71 GB/s; 2 ranks: busbw = algbw
FAST_US = 400.0  # the twin: 167.8 GB/s, above half of any reference
SLOW_HOST = 4  # host ops of 4 ms after the all-reduce's launch (16 ms > its 10 ms): its consumer comes after it
# low_busbw's reference where the traces do not say whether the group spans nodes (no host recorded): one 200 Gb/s
# NIC, 25 GB/s, target 80 % = 20 GB/s. Later bound: 10 ms x (1 - 6.7109 / 20) = 6.6446 ms per step.
BW_GBPS = NELEMS * 4 / (AR_US * 1e3)
LATER_MS = AR_US / 1000 * (1 - BW_GBPS / 20.0)


def _optimizer(rk, k, facts, step, fused: bool = False, busy: bool = False):
    if step is None:
        return
    h = rk.h
    span = OPS * OP_US + 10.0
    rk.cpu("Optimizer.step#SGD.step", h, span, cat="user_annotation")
    names = ["aten::_fused_sgd_"] * OPS if fused else ["aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_add_"]
    for i, op in enumerate(names):
        t = h + 5.0 + i * OP_US
        rk.cpu(op, t, OP_US - 2.0)
        for j in range(KS):
            if busy:  # the kernels cover the op's whole span: the device never waits for the host
                each = OP_US / KS
                rk.kernel(FOREACH_K, t + j * each, each, at=t + 1.0 + j)
            else:
                rk.kernel(FUSED_K if fused else FOREACH_K, t + OP_US - 100.0 + j * K_US, K_US,
                          at=t + OP_US - 110.0 + j)
    rk.h = h + span + 5.0
    rk.d = max(rk.d, rk.h - 20.0)


def _allreduce(rk, k, facts, step, us: float = AR_US):
    if step is None:
        return
    h = rk.h
    args = {"Collective name": "allreduce", "In msg nelems": NELEMS, "Out msg nelems": NELEMS, "dtype": "Float",
            "Group size": k.ranks, "Process Group Name": "grads"}
    rk.cpu("c10d::allreduce_", h, 30.0)
    rk.cpu("record_param_comms", h + 2.0, 25.0, args=args)
    rk.corr += 1
    rk.runtime("cudaLaunchKernel", h + 10.0, 8.0, rk.corr)
    rk.ev.append({"ph": "X", "cat": "kernel", "name": AR, "pid": 0, "tid": 20, "ts": h + 20.0, "dur": us,
                  "args": dict(args, device=0, stream=20, correlation=rk.corr)})
    t = h + 40.0
    for _ in range(SLOW_HOST):  # the host's slow ops, each launching a tiny kernel at its end
        rk.cpu("aten::mul_", t, HOST_US - 5.0)
        rk.kernel(TINY, t + HOST_US - 20.0, 4.0, at=t + HOST_US - 30.0)
        t += HOST_US
    rk.cpu("aten::copy_", t, 20.0)  # the consumer: launched after the all-reduce ended (t > h + 20 + us)
    rk.kernel(COPY, t + 15.0, 30.0, cat="gpu_memcpy", at=t + 5.0)
    rk.h = t + 25.0
    rk.d = max(rk.d, t + 45.0)


HOST_BOUND = {"verdict": "right", "rules": ["host_bound"],
              "why": f"every launching op holds {HOST_US / 1000:g} ms of host work: host-bound by construction"}


def register(out: dict) -> None:
    slow = dict(ranks=2, host_us=HOST_US)
    g = OPT_IDLE_MS
    rng = [g - 0.01, g + 0.01]
    what = (f"`Optimizer.step#SGD.step` holding {OPS} `_foreach_*` ops of {OP_US / 1000:g} ms of host on a host-bound "
            f"rank: {g:.2f} ms of device idle per step inside it")
    out["ncclsync_foreach_sgd_slow_host"] = (Knobs(**slow, chore=_optimizer), {
        "problems": [{"id": "optimizer_step", "what": what,
                      "any": [{"where": "finding", "rules": ["optimizer_step"], "gain_ms": rng,
                               "text": r"3\.0 `_foreach_\*` ops[\s\S]*SGD\(\.\.\., fused=True\)"}]}],
        "silent": [],
        "claims": [{"verdict": "wrong", "rules": ["optimizer_step"], "gain_ms": rng, "gain_outside": True,
                    "why": f"the planted idle inside the span is {g:.3f} ms per step"},
                   {"verdict": "wrong", "rules": ["optimizer_step"], "text": r"foreach=True",
                    "why": "the step already runs `_foreach_*` ops: the switch left is fused=True"},
                   {"verdict": "right", "rules": ["optimizer_step"], "why": what}, HOST_BOUND]})
    out["ncclsync_fused_sgd_twin"] = (Knobs(**slow, chore=partial(_optimizer, fused=True)), {
        "problems": [], "claims": [HOST_BOUND],
        "silent": [{"id": "no_optimizer_step", "why": "the same span already fused (`aten::_fused_sgd_`): no "
                                                      "switch left to name",
                    "match": {"where": "finding", "rules": ["optimizer_step"]}}]})
    out["ncclsync_gpu_bound_sgd_twin"] = (Knobs(**slow, chore=partial(_optimizer, busy=True)), {
        "problems": [], "claims": [HOST_BOUND],
        "silent": [{"id": "no_optimizer_step", "why": "the foreach kernels keep the device busy through the span",
                    "match": {"where": "finding", "rules": ["optimizer_step"]}}]})
    later = rf"up to {LATER_MS:.2f} ms per step"
    out["ncclsync_slow_allreduce_host_set"] = (Knobs(**slow, chore=_allreduce), {
        "problems": [{"id": "low_busbw_after_host", "what": f"a 64 MiB all-reduce in 10 ms ({BW_GBPS:.2f} GB/s) "
                                                            "nothing waits on while the host sets the step",
                      "any": [{"where": "finding", "rules": ["low_busbw"], "text": later}]}],
        "silent": [],
        "claims": [{"verdict": "wrong", "rules": ["low_busbw"], "gain_ms": [0.0, 1.0], "gain_outside": True,
                    "why": "the consumer is launched 6 ms after the all-reduce ends: ~0 of it is on the path now"},
                   {"verdict": "right", "rules": ["low_busbw"], "text": later,
                    "why": f"10 ms x (1 - {BW_GBPS:.4f} / 20) = {LATER_MS:.4f} ms once the host no longer sets it"},
                   HOST_BOUND]})
    out["ncclsync_fast_allreduce_twin"] = (Knobs(**slow, chore=partial(_allreduce, us=FAST_US)), {
        "problems": [], "claims": [HOST_BOUND],
        "silent": [{"id": "no_low_busbw", "why": f"64 MiB in {FAST_US:g} us: "
                                                 f"{NELEMS * 4 / (FAST_US * 1e3):.1f} GB/s",
                    "match": {"where": "finding", "rules": ["low_busbw"]}}]})
